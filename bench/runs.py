"""What the benchmarks' command lines share: where a run works, and where its figures go."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def in_workdir(measure: Callable[[Path], T], workdir: Path | None, prefix: str) -> T:
    """``measure`` run in ``workdir`` (made if missing, kept after), or in a temporary folder
    removed after."""
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        return measure(workdir.resolve())
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        return measure(Path(tmp))


def write_json(path: Path | None, result: Any) -> None:
    """The figures as indented JSON at ``path`` (its folder made), if one is given."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


def emit(report: dict[str, Any], out: Path | None) -> None:
    """A benchmark's JSON report, printed, and written to ``out`` when one is given."""
    text = json.dumps(report, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def corpus_main(
    argv: Sequence[str] | None,
    doc: str | None,
    measure: Callable[[Path, bool], dict[str, Any]],
    *,
    prefix: str,
    quick: str,
) -> int:
    """The command line of a benchmark over a generated corpus: ``--json OUT``, ``--workdir
    DIR`` (the corpus kept there and reused) and ``--quick`` (``quick`` says what it runs);
    ``doc``'s first paragraph is its description."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    parser.add_argument("--json", type=Path, help="write the result here as JSON")
    parser.add_argument("--workdir", type=Path, help="keep the corpus here (reused)")
    parser.add_argument("--quick", action="store_true", help=quick)
    args = parser.parse_args(argv)
    emit(in_workdir(lambda w: measure(w, args.quick), args.workdir, prefix), args.json)
    return 0
