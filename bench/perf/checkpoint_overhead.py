"""What per-chunk checkpoints cost: the same streaming run with them and without them.

    python -m bench.perf.checkpoint_overhead [--rounds 2] [--videos 8] [--seconds 20] --json OUT

Runs reelsense streaming (``bench.perf.modes.streaming``, Kafka and the stage pools) on the same
generated videos, alternately with ``runtime.chunk_checkpoints`` on and off (on, off, on, off,
...: a drift of the machine falls on both), and reports each run's throughput, the medians and
``overhead = 1 - median(on) / median(off)``. A wall-clock A/B on a shared machine is noisy at the
percent level, so it also times the checkpoint work alone on chunks like those of the run (the
chunk's outputs written to the object store, then ``mark_chunk`` on Redis) and relates it to the
per-chunk processing time the runs measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.perf.inputs import ROOT
from bench.perf.modes.common import RunSpec, bench_videos, cores, quiet_environment
from bench.perf.pipeline import run_mode
from bench.perf.summary import summarize
from checkpoint.chunk_store import ChunkStore, chunk_origin
from checkpoint.redis_store import RedisCheckpointStore
from core.config import RedisSettings
from core.records import Chunk, Frame, OcrLine, VideoRef
from devkit.services import redis_server
from storage.local import LocalObjectStore


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quiet_environment()
    out = Path(args.json).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache).resolve()
    videos = bench_videos(cache, args.videos, args.seconds)
    warmup = bench_videos(cache, 1, 2.0, size=(640, 360), grain=0.0, prefix="warmup")[0].path
    work = Path(tempfile.mkdtemp(prefix="rs-ckpt-"))
    base = RunSpec(mode="", workdir="", videos=videos, chunk_frames=args.chunk_frames)
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    try:
        for round_ in range(args.rounds):
            for label, enabled in (("on", True), ("off", False)):
                name = f"checkpoints-{label}-{round_}"
                spec = replace(
                    base,
                    mode=name,
                    workdir=str(work / name),
                    setting={"chunk_checkpoints": enabled},
                    warmup=warmup,
                )
                result, sampler = run_mode("streaming", spec, timeout_s=args.timeout)
                summary = summarize(result, sampler)
                runs[label].append(summary)
                headline = {k: summary.get(k) for k in ("videos_per_min", "wall_s", "error")}
                print(f"{name}: {json.dumps(headline)}", flush=True)
        per_chunk = asyncio.run(_checkpoint_cost(work / "micro", args.chunk_frames, args.samples))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = _report(args, runs, per_chunk)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["overhead"], indent=2))
    print(f"wrote {out}")
    return 0


def _report(
    args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]], per_chunk: dict[str, float]
) -> dict[str, Any]:
    rates = {
        label: [r["videos_per_min"] for r in summaries if "error" not in r]
        for label, summaries in runs.items()
    }
    overhead: dict[str, Any] = {"checkpoint_ms_per_chunk": per_chunk}
    if rates["on"] and rates["off"]:
        on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
        overhead["videos_per_min_on"] = on
        overhead["videos_per_min_off"] = off
        overhead["throughput_overhead"] = round(1 - on / off, 4)
        # Wall time of the machine per chunk in the runs with checkpoints off.
        chunks = sum(r["frames"] for r in runs["off"] if "error" not in r) / args.chunk_frames
        wall = sum(r["wall_s"] for r in runs["off"] if "error" not in r)
        busy_ms = 1000 * wall * cores() / max(1.0, chunks)
        overhead["core_ms_per_chunk"] = round(busy_ms, 1)
        overhead["checkpoint_share_of_chunk"] = round(per_chunk["total_p50"] / busy_ms, 5)
    return {
        "machine": {"cores": cores()},
        "inputs": {
            "videos": args.videos,
            "seconds": args.seconds,
            "chunk_frames": args.chunk_frames,
            "rounds": args.rounds,
        },
        "runs": runs,
        "overhead": overhead,
    }


async def _checkpoint_cost(work: Path, chunk_frames: int, samples: int) -> dict[str, float]:
    """Milliseconds per chunk of the checkpoint work alone (p50 and p95): the outputs of a chunk
    with text on every frame and 384-dim embeddings, written as the processor writes them."""
    with redis_server(work / "redis").start() as redis:
        store = RedisCheckpointStore(
            RedisSettings(url=f"redis://127.0.0.1:{redis.port}/0", key_prefix="ckpt-bench")
        )
        chunks = ChunkStore(LocalObjectStore(str(work / "objects")))
        rng = np.random.default_rng(0)
        put_ms, mark_ms = [], []
        try:
            for n in range(samples):
                ref = VideoRef(f"video-{n}", "file:///bench.mp4")
                claim = await store.claim(ref, "vbench")
                chunk = _chunk(ref.video_id, chunk_frames, rng)
                started = time.perf_counter()
                await asyncio.to_thread(chunks.put, "vbench", chunk, chunk_origin(ref))
                stored = time.perf_counter()
                await store.mark_chunk(ref.video_id, claim.epoch, 0, restored=False, total=None)
                put_ms.append(1000 * (stored - started))
                mark_ms.append(1000 * (time.perf_counter() - stored))
        finally:
            await store.close()
    total = [a + b for a, b in zip(put_ms, mark_ms, strict=True)]
    return {
        "put_p50": _ms(put_ms, 0.5),
        "mark_chunk_p50": _ms(mark_ms, 0.5),
        "total_p50": _ms(total, 0.5),
        "total_p95": _ms(total, 0.95),
    }


def _chunk(video_id: str, frames: int, rng: np.random.Generator) -> Chunk:
    line = OcrLine("SALE 50% OFF TODAY", 0.93, ((10, 10), (300, 10), (300, 40), (10, 40)))
    return Chunk(
        video_id=video_id,
        index=0,
        frames=[
            Frame(
                index=i,
                timestamp_s=float(i),
                image=None,
                ocr_lines=[line, line],
                caption="",
                embedding=rng.standard_normal(384).astype(np.float32),
            )
            for i in range(frames)
        ],
    )


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, help="where to write the report")
    parser.add_argument("--rounds", type=int, default=2, help="on/off pairs")
    parser.add_argument("--videos", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--chunk-frames", type=int, default=8)
    parser.add_argument("--samples", type=int, default=500, help="chunks timed alone")
    parser.add_argument("--cache", default=str(ROOT / ".reelsense" / "bench" / "videos"))
    parser.add_argument("--timeout", type=float, default=3600.0, help="per run, seconds")
    return parser


if __name__ == "__main__":
    sys.exit(main())
