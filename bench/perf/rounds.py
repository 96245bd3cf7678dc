"""Rounds: the service's defaults against a process per core, in turn, several times.

    python -m bench.perf.rounds [--rounds 3] [--videos 8] [--seconds 20] --json OUT

``bench.perf.pipeline`` runs each mode once, one after the other. On a shared host whose speed
drifts over minutes, that moves the ratio between two modes by as much as the gap it
measures: in one run here the single process decoded a video in 3.25 CPU-s, and in the next
in 2.96. Here the process per core (``sequential_per_core``), the same writing its results as
the service does (``sequential_per_core_writes``) and the service's defaults
(``streaming:st-default``) run in turn, round after round, the order turned by one each
round; the ratios are taken within each round, and the report gives every round's and their
median (the same keys as ``bench.perf.pipeline``: ``default_vs_per_core`` and the rest).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.perf.inputs import add_input_arguments, bench_inputs
from bench.perf.mode_settings import STREAMING_SETTINGS
from bench.perf.modes.common import RunSpec, cores, quiet_environment
from bench.perf.pipeline import per_core_pool, run_mode, wait_until_idle
from bench.perf.summary import (
    DEFAULT_MODE,
    PER_CORE_MODE,
    PER_CORE_WRITES_MODE,
    defaults_vs_processes,
    summarize,
)

#: What each mode's summary keeps in the report, per round.
_KEPT = (
    "videos_per_min",
    "first_result_latency_s",
    "latency_p50_s",
    "tree_cpu_s",
    "cpu_s_by_process",
    "stage_work_cpu_s_per_video",
    "error",
)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quiet_environment()
    out = Path(args.json).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    base, warmup = bench_inputs(args, Path(args.cache).resolve(), args.videos, args.seconds)
    plan = _plan(replace(base, warmup=warmup))
    work = Path(tempfile.mkdtemp(prefix="rs-rounds-"))
    rounds: list[dict[str, dict[str, Any]]] = []
    idle_deadline = time.monotonic() + args.idle_wait  # one budget for every wait of the run
    try:
        for number in range(args.rounds):
            turn = number % len(plan)
            modes: dict[str, dict[str, Any]] = {}
            for name, module, spec in plan[turn:] + plan[:turn]:
                folder = work / f"{number}-{name.replace(':', '-')}"
                wait_until_idle(args.idle_busy, max(0.0, idle_deadline - time.monotonic()))
                result, sampler = run_mode(
                    module, replace(spec, mode=name, workdir=str(folder)), timeout_s=args.timeout
                )
                modes[name] = summarize(result, sampler)
                shutil.rmtree(folder, ignore_errors=True)
            rounds.append(modes)
            print(f"round {number + 1}: {json.dumps(round_ratios(modes))}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = rounds_report(rounds)
    report["inputs"] = {"videos": args.videos, "seconds": args.seconds, "cores": cores()}
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["median"], indent=2))
    print(f"wrote {out}")
    return 0


def _plan(base: RunSpec) -> list[tuple[str, str, RunSpec]]:
    """The three modes of a round, as ``bench.perf.pipeline`` runs them: (name, module, spec)."""
    single = replace(base, threads="single")
    return [
        (PER_CORE_MODE, "sequential", per_core_pool(single)),
        (PER_CORE_WRITES_MODE, "sequential", per_core_pool(single, write=True)),
        (DEFAULT_MODE, "streaming", replace(base, setting=STREAMING_SETTINGS["st-default"])),
    ]


def round_ratios(modes: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The service's defaults against the process pools within one round."""
    ratios: dict[str, Any] = {}
    defaults_vs_processes(ratios, modes)
    return ratios


def rounds_report(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Every round's modes and ratios, and each ratio's median over the rounds where it
    was measured (a mode that failed leaves its round's ratios out)."""
    ratios = [round_ratios(modes) for modes in rounds]
    per_round = [
        {
            "modes": {name: {k: s[k] for k in _KEPT if k in s} for name, s in modes.items()},
            "ratios": measured,
        }
        for modes, measured in zip(rounds, ratios, strict=True)
    ]
    keys = sorted({key for measured in ratios for key in measured})
    median: dict[str, float | None] = {}
    for key in keys:
        values = [value for measured in ratios if (value := measured.get(key)) is not None]
        median[key] = round(statistics.median(values), 3) if values else None
    return {"rounds": per_round, "median": median}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, help="where to write the report")
    parser.add_argument("--rounds", type=int, default=3)
    add_input_arguments(parser)
    parser.set_defaults(videos=8, seconds=20.0)
    return parser


if __name__ == "__main__":
    sys.exit(main())
