"""Modules stay under 400 lines (STYLE.md, points 10-11): a longer one holds more than one
concept, and is split around one of them, not to meet the count."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
# Where git cannot list the files, these folders are not walked: environments, built docs
# and packages.
SKIPPED = {".venv", "site", "build"}


def _python_files() -> list[Path]:
    """The repository's Python files outside ``tests/``: tracked ones and new ones git does not
    ignore, or, without git, those found below the root."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return [
            path
            for path in ROOT.rglob("*.py")
            if (parts := path.relative_to(ROOT).parts)[0] != "tests"
            and not SKIPPED.intersection(parts)
            and not any(part.startswith(".") for part in parts)
        ]
    return [ROOT / name for name in listed if not name.startswith("tests/")]


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for path in _python_files()
        if path.is_file()
        and (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, (
        f"modules over {MAX_LINES} lines: "
        + ", ".join(f"{name} ({count})" for name, count in sorted(long.items()))
        + "; move a concept of each into a module of its own"
    )
