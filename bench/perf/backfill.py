"""Backfills: priority lanes under load, Ray Data against streaming, a stage added.

    python -m bench.perf.backfill --json OUT [--parts lanes,throughput,added]
        [--fresh 8] [--bulk 40] [--seconds 20] [--gap 6]
        [--batch-videos 20] [--added-videos 200] [--added-seconds 6]

``lanes`` (b): how long fresh uploads take while a bulk lane runs. The service runs with its
defaults in this process, on the embedded stack (as ``bench.perf.modes.streaming`` runs it). Three
phases, one service:

1. ``idle``: ``--fresh`` uploads arrive one every ``--gap`` s on the fresh topic with nothing else
   to do; each one's latency is from its event to its ``done`` (the checkpoint's own time).
2. ``bulk alone``: ``--bulk`` events are published to the bulk topic at once; for
   ``--window`` s no fresh upload comes, and the share of the machine's CPU in use is taken
   (``bulk_share_idle``: the bulk lane may use what fresh uploads leave, all of it here).
3. ``busy``: the same fresh uploads again (new ids, same files) while the bulk lane still has
   work; ``fresh_p95_ratio`` is their p95 latency over the idle one's.

``throughput`` (a) and ``added`` (c): see ``bench.perf.backfill_batch``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
from aiokafka import AIOKafkaProducer

from bench.perf.backfill_batch import added_stage, throughput
from bench.perf.inputs import ROOT
from bench.perf.modes.common import RunSpec, VideoSpec, bench_videos, now, quiet_environment
from bench.perf.modes.streaming import service_config
from checkpoint.base import VideoState
from consumers.events import VideoUploaded
from devkit.stack import EmbeddedStack
from runtime.cluster import ray_connection
from runtime.service import ReelsenseService


async def _publish(producer: AIOKafkaProducer, topic: str, video: VideoSpec) -> float:
    event = VideoUploaded(video_id=video.video_id, uri=Path(video.path).as_uri())
    sent = now()
    await producer.send_and_wait(topic, event.to_bytes(), key=video.video_id.encode())
    return sent


async def _done_at(service: ReelsenseService, video_id: str, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = await service.store.get(video_id)
        if status is not None and status.status is VideoState.FAILED:
            raise RuntimeError(f"{video_id} failed: {status.error_code}: {status.error_message}")
        if status is not None and status.status is VideoState.DONE:
            assert status.finished_at is not None
            return status.finished_at.timestamp()
        await asyncio.sleep(0.25)
    raise TimeoutError(f"{video_id} not done in {timeout_s:.0f}s")


async def _arrivals(
    service: ReelsenseService,
    producer: AIOKafkaProducer,
    topic: str,
    videos: list[VideoSpec],
    gap_s: float,
) -> list[float]:
    """Publish one video every ``gap_s``; each one's seconds from its event to done."""

    async def one(index: int, video: VideoSpec) -> float:
        await asyncio.sleep(index * gap_s)
        sent = await _publish(producer, topic, video)
        return await _done_at(service, video.video_id, 900) - sent

    return list(await asyncio.gather(*(one(i, v) for i, v in enumerate(videos))))


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _summary(latencies: list[float]) -> dict[str, Any]:
    return {
        "latencies_s": [round(v, 2) for v in latencies],
        "p50_s": round(statistics.median(latencies), 2),
        "p95_s": round(_p95(latencies), 2),
    }


async def _bulk_done(service: ReelsenseService, ids: list[str]) -> int:
    statuses = [await service.store.get(v) for v in ids]
    return sum(1 for s in statuses if s is not None and s.status is VideoState.DONE)


async def _measure(args: argparse.Namespace, spec: RunSpec, stack: EmbeddedStack) -> dict[str, Any]:
    config = service_config(spec, stack)
    bulk_topic = config.kafka.bulk_topic
    assert bulk_topic is not None
    files = spec.videos
    fresh = [replace(files[i % len(files)], video_id=f"fresh-{i}") for i in range(args.fresh)]
    busy = [replace(v, video_id=f"busy-{v.video_id}") for v in fresh]
    bulk = [replace(files[i % len(files)], video_id=f"bulk-{i}") for i in range(args.bulk)]
    with ray_connection(config, local=True):
        service = ReelsenseService(config)
        placed = service.config
        await service.start()
        running = asyncio.create_task(service.run())
        producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap, acks="all")
        await producer.start()
        try:
            warm = VideoSpec("warmup", str(spec.warmup), 0.0)
            sent = await _publish(producer, config.kafka.topic, warm)
            await _done_at(service, warm.video_id, 900)
            print(f"warm-up done in {now() - sent:.1f}s", flush=True)

            idle = await _arrivals(service, producer, config.kafka.topic, fresh, args.gap)
            print(f"idle: {_summary(idle)}", flush=True)

            for video in bulk:
                await _publish(producer, bulk_topic, video)
            await asyncio.sleep(5.0)  # the lane fills its slots
            psutil.cpu_percent(interval=None)
            done_before = await _bulk_done(service, [v.video_id for v in bulk])
            await asyncio.sleep(args.window)
            share = psutil.cpu_percent(interval=None) / 100
            done_in_window = await _bulk_done(service, [v.video_id for v in bulk]) - done_before
            print(f"bulk alone: machine {share:.0%} busy, {done_in_window} done", flush=True)

            loaded = await _arrivals(service, producer, config.kafka.topic, busy, args.gap)
            left = args.bulk - await _bulk_done(service, [v.video_id for v in bulk])
            print(f"busy: {_summary(loaded)}, bulk videos left {left}", flush=True)
        finally:
            await producer.stop()
            service.request_stop()
            await asyncio.gather(running, return_exceptions=True)
    idle_p95, busy_p95 = _p95(idle), _p95(loaded)
    return {
        "inputs": {
            "fresh": args.fresh,
            "bulk": args.bulk,
            "seconds": args.seconds,
            "gap_s": args.gap,
            "window_s": args.window,
            "max_in_flight": placed.kafka.max_in_flight,  # as the placement profile set it
            "bulk_share": placed.kafka.bulk_share,
        },
        "fresh_idle": _summary(idle),
        "fresh_busy": _summary(loaded),
        "fresh_p95_ratio": round(busy_p95 / idle_p95, 3),
        "bulk_share_idle": round(share, 3),
        "bulk_videos_per_min_alone": round(done_in_window * 60 / args.window, 2),
        "bulk_left_after_busy_phase": left,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, type=Path)
    parser.add_argument("--fresh", type=int, default=8, help="fresh uploads per phase")
    parser.add_argument("--bulk", type=int, default=40, help="videos in the bulk lane")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each video")
    parser.add_argument("--gap", type=float, default=6.0, help="seconds between fresh uploads")
    parser.add_argument("--window", type=float, default=40.0, help="bulk alone, seconds")
    parser.add_argument("--cache", default=str(ROOT / ".reelsense" / "bench" / "videos"))
    parser.add_argument("--parts", default="lanes,throughput,added")
    parser.add_argument("--batch-videos", type=int, default=20, help="throughput: videos")
    parser.add_argument("--added-videos", type=int, default=200, help="added: videos")
    parser.add_argument("--added-seconds", type=float, default=6.0, help="added: their length")
    args = parser.parse_args(argv)
    quiet_environment()
    cache = Path(args.cache).resolve()
    parts = set(args.parts.split(","))
    report: dict[str, Any] = {}
    if "lanes" in parts:
        report.update(_lanes(args, cache))
    if "throughput" in parts:
        report["throughput"] = throughput(args.batch_videos, args.seconds, cache)
    if "added" in parts:
        added = added_stage(args.added_videos, args.added_seconds, cache)
        report["added_stage"] = added
        for key in _ADDED_KEYS:
            report[key] = added[key]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    headline = ("fresh_p95_ratio", "bulk_share_idle", *_ADDED_KEYS)
    print(json.dumps({k: report[k] for k in headline if k in report}))
    return 0


_ADDED_KEYS = ("added_stage_frames_decoded", "added_stage_cost_ratio")


def _lanes(args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    videos = bench_videos(cache, 4, args.seconds)
    warmup = bench_videos(cache, 1, 2.0, size=(640, 360), grain=0.0, prefix="warmup")[0]
    workdir = Path(tempfile.mkdtemp(prefix="rs-backfill-"))  # a fresh stack: nothing known
    spec = RunSpec(mode="backfill", workdir=str(workdir), videos=videos, warmup=warmup.path)
    try:
        with EmbeddedStack(workdir / "stack") as stack:
            return asyncio.run(_measure(args, spec, stack))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
