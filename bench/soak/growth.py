"""Growth run: does what the service keeps stop growing once retention and upkeep catch up?

    python -m bench.soak.growth --videos 2000 --json growth.json [--keep 200] [--workdir DIR]

Run from the repository root. Starts the embedded stack and ``reelsense serve`` on it with short
retentions (finished records and tombstones kept 30 s, the delivery log 60 s, Lance versions
20 s, deletions purged within 60 s, upkeep every 10 s: steady within the run's first quarter),
and sends ``--videos`` short videos through it, a steady stream, as a platform's would: each
is deleted once ``--keep`` newer ones are done (uploads and takedowns every day), so the live
library stays the same size and everything the service keeps should level off. Every
``--every`` videos done it samples the run's Redis keys and memory, each Lance table's
fragments and versions, the object store's objects and the bytes on disk under the service's
folders (tables, objects, scratch). Compactions make some series a saw, so each series' growth
is its least-squares slope over the second half of the run, times that half's span, as a share
of its mean there (and its slope per 1,000 videos); the run passes when every one grew by less
than 5%, or, for the Lance tables' fragments and versions (saws whose height the settings
bound), never rose in the second half above the highest point of the first (``ok``).
Redis's append-only file is sampled too but not judged: Redis itself rewrites it once it has
doubled past ``auto-aof-rewrite-min-size`` (64 MiB by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import redis.asyncio as aioredis

from checkpoint.base import VideoState
from consumers.events import VideoDeleted
from devkit.service_run import ServiceRun
from devkit.stack import EmbeddedStack
from devkit.workload import KafkaRecord, upload_record, write_videos

log = logging.getLogger("bench.soak.growth")

GROWTH_LIMIT = 0.05  # what the second half may add, as a share of the size at half-way
# Series that compactions and version cleanup cut down in steps: a saw whose height the
# settings bound (``storage.lance_compact_every`` commits, ``lance_keep_versions_s``). A slope
# fitted to a few dozen samples of a saw says more about where its teeth fall than about
# growth (fragments between 6 and 60 over 2,000 videos fitted +29%), so such a series has also
# levelled off when its second half never rises above the highest point of its first.
SAWS = frozenset({"lance_fragments", "lance_versions"})


async def run_growth(videos: int, keep: int, every: int, root: Path) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    with EmbeddedStack(root / "stack") as stack:
        async with ServiceRun(
            root, bootstrap=stack.bootstrap, redis_url=stack.redis_url, unique="growth"
        ) as run:
            config = run.configure(
                redis={"finished_retention_s": 30.0, "deleted_retention_s": 30.0},
                storage={"lance_keep_versions_s": 20.0, "deletion_max_s": 60.0},
                runtime={"sweep_every_s": 10.0, "sweep_after_s": 120.0},
                notify={"log_retention_s": 60.0},
            )
            files = write_videos(run.videos_dir, 8, seconds_per_scene=0.5)
            service = run.start_process()
            await service.wait_healthy(timeout_s=300)
            raw = aioredis.Redis.from_url(config.redis.url)
            try:
                await _stream(run, list(files.values()), videos, keep, every, samples, raw, root)
            finally:
                await raw.aclose()
            await asyncio.to_thread(service.stop)
    return _report(samples, videos, keep)


async def _stream(
    run: ServiceRun,
    files: list[Path],
    videos: int,
    keep: int,
    every: int,
    samples: list[dict[str, Any]],
    raw: aioredis.Redis,
    root: Path,
) -> None:
    """Upload ``videos`` videos, a few in flight at once; delete each once ``keep`` newer
    ones are done; sample every ``every`` done."""
    in_flight = run.config.kafka.max_in_flight * 2
    sent, done = 0, 0
    live: deque[str] = deque()  # done and not deleted, oldest first
    pending: set[str] = set()
    started = time.monotonic()
    while done < videos:
        while sent < videos and len(pending) < in_flight:
            video_id = f"g{sent:06d}"
            await run.publish([upload_record(video_id, files[sent % len(files)])])
            pending.add(video_id)
            sent += 1
        finished = []
        for video_id in list(pending):
            status = await run.store.get(video_id)
            if status is not None and status.status in (VideoState.DONE, VideoState.FAILED):
                finished.append(video_id)
        for video_id in sorted(finished):
            pending.discard(video_id)
            live.append(video_id)
            done += 1
            if done % every == 0:
                samples.append(await _sample(run, raw, root, done, time.monotonic() - started))
                log.info("%d videos done: %s", done, samples[-1])
        deletions = []
        while len(live) > keep:
            deletions.append(_deletion(live.popleft()))
        if deletions:
            await run.publish(deletions)
        if not finished:
            await asyncio.sleep(0.2)


def _deletion(video_id: str) -> KafkaRecord:
    event = VideoDeleted(type="video.deleted", video_id=video_id, tenant="default")
    return KafkaRecord(video_id.encode(), event.to_bytes())


async def _sample(
    run: ServiceRun, raw: aioredis.Redis, root: Path, done: int, elapsed_s: float
) -> dict[str, Any]:
    prefix = run.config.redis.key_prefix
    keys = 0
    async for _ in raw.scan_iter(match=f"{prefix}:*", count=1000):
        keys += 1
    memory = int((await raw.info("memory"))["used_memory"])
    storage = run.config.storage
    folders = (Path(storage.lance_uri), Path(storage.object_store_uri), root / "work")
    on_disk = await asyncio.to_thread(_on_disk, folders, root / "stack" / "redis")
    return {
        "videos": done,
        "elapsed_s": round(elapsed_s, 1),
        "redis_keys": keys,
        "redis_memory_bytes": memory,
        **on_disk,
    }


def _on_disk(folders: tuple[Path, Path, Path], redis_dir: Path) -> dict[str, int]:
    lance_root, objects, _ = folders
    tables = _tables(lance_root)
    return {
        "lance_fragments": sum(t["fragments"] for t in tables.values()),
        "lance_versions": sum(t["versions"] for t in tables.values()),
        "objects": _files(objects),
        "disk_bytes": sum(_bytes(folder) for folder in folders),
        "redis_aof_bytes": _bytes(redis_dir),
    }


def _files(folder: Path) -> int:
    return sum(1 for _ in _sizes(folder))


def _bytes(folder: Path) -> int:
    return sum(_sizes(folder))


def _sizes(folder: Path) -> Iterator[int]:
    """The size of every file under ``folder``. The service removes files while they are
    counted (compactions, upkeep, deletions): one gone before it is looked at is left out, and
    ``os.walk`` skips a folder gone before it is listed."""
    for top, _, names in os.walk(folder):
        for name in names:
            try:
                yield os.stat(os.path.join(top, name)).st_size
            except FileNotFoundError:
                continue


def _tables(lance_root: Path) -> dict[str, dict[str, int]]:
    found = {}
    for path in sorted(lance_root.glob("*.lance")):
        for attempt in range(1, 6):
            try:
                dataset = lance.dataset(str(path))
                found[path.name] = {
                    "fragments": len(dataset.get_fragments()),
                    "versions": len(dataset.versions()),
                }
                break
            except (OSError, ValueError):  # a version removed while listed: look again
                if attempt == 5:
                    raise
                time.sleep(0.2)
    return found


SERIES = (
    "redis_keys",
    "redis_memory_bytes",
    "lance_fragments",
    "lance_versions",
    "objects",
    "disk_bytes",
)


def _report(samples: list[dict[str, Any]], videos: int, keep: int) -> dict[str, Any]:
    half = [s for s in samples if s["videos"] >= videos // 2]
    first = [s for s in samples if s["videos"] < videos // 2] or samples[:1]
    second = half or samples[-2:]
    xs = [float(s["videos"]) for s in second]
    span = max(1.0, xs[-1] - xs[0])
    growth: dict[str, Any] = {}
    for name in SERIES:
        ys = [float(s[name]) for s in second]
        slope, mean = _slope(xs, ys), sum(ys) / len(ys)
        grew = slope * span / max(1.0, mean)
        peaks = max(s[name] for s in first), max(s[name] for s in second)
        growth[name] = {
            "at_half": second[0][name],
            "at_end": second[-1][name],
            "mean_second_half": round(mean, 1),
            "second_half_growth": round(grew, 4),
            "slope_per_1000_videos": round(slope * 1000, 1),
            "peak_first_half": peaks[0],
            "peak_second_half": peaks[1],
            "levelled": grew < GROWTH_LIMIT or (name in SAWS and peaks[1] <= peaks[0]),
        }
    ok = all(g["levelled"] for g in growth.values())
    return {"videos": videos, "keep": keep, "growth": growth, "samples": samples, "ok": ok}


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs``."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak.growth", description=__doc__)
    parser.add_argument("--videos", type=int, default=2000)
    parser.add_argument("--keep", type=int, default=200, help="live videos; older are deleted")
    parser.add_argument("--every", type=int, default=20, help="sample every N videos done")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    root = (args.workdir or Path(tempfile.mkdtemp(prefix="reelsense-growth-"))).resolve()
    # SIGTERM as Ctrl-C: the run is cancelled and stops everything it started, by PID.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    report = asyncio.run(run_growth(args.videos, args.keep, args.every, root))
    report["workdir"] = str(root)
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
