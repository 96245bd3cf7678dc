"""What keeping Lance tables costs and buys over a long run of small merge-inserts.

    python -m bench.perf.lance_upkeep --json OUT [--commits 1000] [--rows-per-commit 8] [--quick]

In a streaming service each chunk of a video in analysis is merged into the search table once
it is done (``write_partial``), and every few finished videos are upserted into every table
(``write``): each commit adds a fragment, a manifest and often deletion files. ``LanceTable``
compacts every ``storage.lance_compact_every`` commits and drops versions older than
``storage.lance_keep_versions_s``; ``IndexUpkeep`` refreshes the search indexes in the
background. The same writes (``CHUNKS`` parts of ``--rows-per-commit`` segments per video,
``VIDEOS_PER_BATCH`` videos per final write) go through ``LanceSearchIndex`` and
``LanceSummarySink`` under each of ``POLICIES``: none (the full-text index, without which a
full-text query finds nothing, built on the empty table only), the defaults, and more frequent.
After every tenth of the commits: each table's fragments, versions, bytes on disk and the
latency of ``READS``. A run shorter than the retention keeps every version: at the end the
defaults' tables are cleaned up with none, to show what it frees once the versions age.

Vectors come from a hash of the text, not a model: their values change nothing a commit or a
scan costs, and a model would take longer than the tables.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.perf.lance_upkeep_parts import (
    CHUNKS,
    POLICIES,
    TENANTS,
    UPKEEP_LOGGERS,
    VIDEOS_PER_BATCH,
    Sinks,
    Stream,
    WarningCount,
)
from bench.runs import in_workdir, write_json
from bench.search.phrases import latency_queries
from core.search import SearchFilter
from sinks.lance_rows import sql_string
from sinks.lance_table import LanceTable

SNAPSHOTS = 10
READS = ("video_row", "tenant_videos", "video_segments", "text_search", "vector_search")


def run_policy(name: str, sinks: Sinks, args: argparse.Namespace) -> tuple[dict[str, Any], Stream]:
    """The stream written to ``sinks``: its timeline of snapshots and its totals."""
    stream = Stream(args.rows_per_commit)
    every = max(1, args.commits // SNAPSHOTS)
    write_s, window_s, batches = 0.0, 0.0, 0
    timeline = []
    warnings, loggers = WarningCount(), [logging.getLogger(n) for n in UPKEEP_LOGGERS]
    for logger in loggers:
        logger.addHandler(warnings)
    try:
        for step in range(args.commits):
            started = time.perf_counter()
            sinks.search.write_partial([stream.part(step)])
            batch = stream.finished_batch(step)
            if batch:
                sinks.search.write(batch)
                sinks.summary.write(batch)
                batches += 1
            window_s += time.perf_counter() - started
            if (step + 1) % every == 0 or step + 1 == args.commits:
                sinks.upkeep.wait_idle(60.0)
                snapshot = _snapshot(sinks, stream.finished, step + 1, args.reads)
                # Compaction included, the background index passes not.
                snapshot["write_ms_per_step"] = round(1000 * window_s / (step % every + 1), 1)
                timeline.append(snapshot)
                write_s, window_s = write_s + window_s, 0.0
                shapes = {t: (s["fragments"], s["versions"]) for t, s in snapshot["tables"].items()}
                print(f"{name}: {step + 1} commits, (fragments, versions) {shapes}", flush=True)
        sinks.upkeep.wait_idle(60.0)
        compact_s = sum(sum(t.compact_s) for t in sinks.tables.values())
        totals = {
            "commits": {"search": args.commits + batches, "videos": batches},
            "compactions": {n: t.compactions() for n, t in sinks.tables.items()},
            "commit_s": round(write_s - compact_s, 2),
            "compaction_s": round(compact_s, 2),
            "index_upkeep_s": round(sinks.upkeep.busy_s, 2),
            "failed_upkeep": dict(warnings.counts),
        }
        if name == "defaults":
            totals["after_retention"] = _aged(sinks)
    finally:
        sinks.search.close()
        for logger in loggers:
            logger.removeHandler(warnings)
    return {"timeline": timeline, **totals}, stream


def _snapshot(sinks: Sinks, videos: list[str], commits: int, reads: int) -> dict[str, Any]:
    calls = _read_calls(sinks, videos, commits, reads)
    return {
        "commits": commits,
        "tables": {name: _shape(table) for name, table in sinks.tables.items()},
        "reads_ms": _timed({"": calls}, reads)[""],
    }


Reads = dict[str, Callable[[int], object]]


def _read_calls(sinks: Sinks, videos: list[str], seed: int, reads: int) -> Reads:
    """Each of ``READS`` as a call of its ``i``-th sample: the same videos and queries for
    the same seed."""
    rng = np.random.default_rng(seed)
    videos = videos or ["video-000000"]
    queries = latency_queries(rng, reads)

    def pick() -> str:
        return videos[int(rng.integers(len(videos)))]

    return {
        "video_row": lambda _: sinks.summary.video_row(pick()),
        "tenant_videos": lambda i: sinks.summary.video_rows(tenant=f"tenant-{i % TENANTS}"),
        "video_segments": lambda _: sinks.search.table.rows(
            filter=f"video_id = {sql_string(pick())}", columns=["segment", "text"]
        ),
        "text_search": lambda i: sinks.search.search(queries[i], method="text"),
        "vector_search": lambda i: sinks.search.search(
            queries[i], method="vector", where=SearchFilter(tenant=f"tenant-{i % TENANTS}")
        ),
    }


def _shape(table: LanceTable) -> dict[str, Any]:
    dataset = table.open()
    if dataset is None:
        return {}
    rows = dataset.count_rows()
    indexed = {i.name: int(i.num_rows_indexed) for i in dataset.describe_indices()}
    return {
        "rows": rows,
        "fragments": len(dataset.get_fragments()),
        "versions": len(dataset.versions()),
        "bytes": sum(p.stat().st_size for p in Path(table.uri).rglob("*") if p.is_file()),
        "unindexed_rows": {name: rows - covered for name, covered in indexed.items()},
    }


def _aged(sinks: Sinks) -> dict[str, Any]:
    """Each table once its versions are older than the retention: cleaned up as ``compact``
    cleans, with a retention of nothing."""
    shapes = {}
    for name, table in sinks.tables.items():
        dataset = table.open()
        if dataset is not None:
            dataset.cleanup_old_versions(older_than=timedelta(0))
        shapes[name] = _shape(table)
    return shapes


def _timed(calls: dict[str, Reads], samples: int) -> dict[str, dict[str, dict[str, float]]]:
    """The mean and p95 milliseconds of each read of each set of ``calls``, after one call
    untimed (caches). The sets take turns, so that a slow spell of the machine falls on all."""
    seconds: dict[str, dict[str, list[float]]] = {name: {} for name in calls}
    for kind in READS:
        for reads in calls.values():
            reads[kind](0)
        for i in range(samples):
            for name, reads in calls.items():
                started = time.perf_counter()
                reads[kind](i)
                seconds[name].setdefault(kind, []).append(time.perf_counter() - started)
    return {
        name: {kind: _ms(values) for kind, values in kinds.items()}
        for name, kinds in seconds.items()
    }


def _ms(seconds: list[float]) -> dict[str, float]:
    ms = 1000 * np.asarray(seconds)
    return {"mean": round(float(ms.mean()), 2), "p95": round(float(np.percentile(ms, 95)), 2)}


def headline(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The end of each run side by side, under flat keys."""
    out: dict[str, Any] = {}
    for name, run in runs.items():
        end = run["timeline"][-1]
        out[f"reads_p95_ms_{name}"] = {k: v["p95"] for k, v in run["reads_ms_at_end"].items()}
        # The end may fall anywhere in a compaction cycle: the run's typical p95 as well.
        out[f"reads_p95_ms_run_median_{name}"] = {
            k: round(float(np.median([s["reads_ms"][k]["p95"] for s in run["timeline"]])), 2)
            for k in READS
        }
        for key in ("fragments", "versions", "bytes"):
            out[f"{key}_{name}"] = {t: s[key] for t, s in end["tables"].items()}
        upkeep = run["compaction_s"] + run["index_upkeep_s"]
        total = max(1e-9, run["commit_s"] + upkeep)
        out[f"write_s_{name}"] = round(total, 2)
        out[f"upkeep_share_of_write_time_{name}"] = round(upkeep / total, 4)
        out[f"compaction_share_of_write_time_{name}"] = round(run["compaction_s"] / total, 4)
        steps = [s["write_ms_per_step"] for s in run["timeline"]]
        out[f"write_ms_per_step_{name}"] = {"first": steps[0], "last": steps[-1]}
        out[f"failed_upkeep_{name}"] = run["failed_upkeep"]
    for key in ("read_speedup", "read_speedup_run_median"):
        suffix = key.removeprefix("read_speedup")
        slow = out[f"reads_p95_ms{suffix}_no_upkeep"]
        fast = out[f"reads_p95_ms{suffix}_defaults"]
        out[key] = {k: round(slow[k] / max(fast[k], 1e-3), 2) for k in READS}
    aged, end = runs["defaults"]["after_retention"], runs["defaults"]["timeline"][-1]
    out["bytes_defaults_after_retention"] = {t: s["bytes"] for t, s in aged.items()}
    out["versions_defaults_after_retention"] = {t: s["versions"] for t, s in aged.items()}
    # What each version younger than the retention holds on disk: manifests, and the
    # files that compaction and later commits superseded.
    out["bytes_per_retained_version_defaults"] = {
        t: round((s["bytes"] - aged[t]["bytes"]) / max(1, s["versions"] - 1))
        for t, s in end["tables"].items()
    }
    return out


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {}
    calls: dict[str, Reads] = {}
    for name, policy in POLICIES.items():
        sinks = Sinks.opened(root / name, policy, args.vector_index_min_rows)
        run, stream = run_policy(name, sinks, args)
        runs[name] = {"policy": policy.__dict__, **run}
        calls[name] = _read_calls(sinks, stream.finished, args.commits, args.reads)
    # The tables as the runs left them, read side by side: the timelines' reads, each taken
    # in its own run, may meet the machine in another mood.
    for name, reads in _timed(calls, args.reads).items():
        runs[name]["reads_ms_at_end"] = reads
    inputs = {**vars(args), "chunks_per_video": CHUNKS, "videos_per_batch": VIDEOS_PER_BATCH}
    return {"inputs": inputs, "headline": headline(runs), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.commits, args.reads, args.vector_index_min_rows = 160, 5, 1000
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    workdir = None if args.workdir is None else Path(args.workdir)
    report = in_workdir(lambda root: measure(args, root), workdir, "rs-lance-upkeep-")
    write_json(Path(args.json), report)
    for key, value in report["headline"].items():
        print(f"{key}: {value}")
    print(f"wrote {args.json}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, help="where to write the report")
    parser.add_argument("--commits", type=int, default=1000, help="partial writes per policy")
    parser.add_argument("--rows-per-commit", type=int, default=8)
    parser.add_argument("--reads", type=int, default=20, help="timed reads of each kind")
    parser.add_argument(
        "--vector-index-min-rows",
        type=int,
        default=4000,
        help="below the service's default, so that the run's table gets a vector index early",
    )
    parser.add_argument("--workdir", help="keep the tables here (default: a temporary folder)")
    parser.add_argument("--quick", action="store_true", help="160 commits, 5 reads of each")
    return parser


if __name__ == "__main__":
    sys.exit(main())
