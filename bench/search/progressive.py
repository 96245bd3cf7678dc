"""How soon a video in analysis is findable: from a chunk's analysis to its text in search.

    python -m bench.search.progressive [--json OUT] [--seconds 120] [--workdir DIR]

One long video (captions that change every few seconds, English sentences said over them)
goes through the per-video orchestration with the local executor, real Redis, Lance and the
default text model. The writer times each part from its analysis (the chunk's stages done,
or a window of speech recognised) to its commit in the search index, the moment a query
finds it (``chunk_to_searchable_s``). Meanwhile every caption is searched for, 20 times a
second, to see how long before the video is done each one could be found.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkpoint.chunk_store import ChunkStore
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from core.search import SearchFilter
from devkit.samples import Scene, write_video
from devkit.services import redis_server
from devkit.speech_videos import espeak_path, speak_over
from models.embedding import text_embedder
from runtime.local_executor import LocalExecutor
from runtime.processor import VideoProcessor
from runtime.results import LocalResults
from sinks.search import LanceSearchIndex
from stages.pipeline import Pipeline
from storage.local import LocalObjectStore

SCENE_S = 6.0
WORDS = (
    "HARBOR", "MARKET", "STATION", "LIBRARY", "GARDEN", "MUSEUM", "BRIDGE", "TOWER",
    "STADIUM", "THEATER", "ORCHARD", "FACTORY", "AIRPORT", "CASTLE", "VALLEY", "ISLAND",
    "CANYON", "GLACIER", "FOREST", "DESERT",
)  # fmt: skip


def captions(seconds: float) -> list[tuple[float, str]]:
    """(start, text) of each caption: a word and a number, a new one every ``SCENE_S``."""
    count = max(1, int(seconds // SCENE_S))
    return [(i * SCENE_S, f"{WORDS[i % len(WORDS)]} {100 + i}") for i in range(count)]


def write_long_video(folder: Path, seconds: float) -> Path:
    """The video, in ``folder`` emptied of an earlier run's tables and checkpoints."""
    for left in ("redis", "lance", "o", "work"):
        shutil.rmtree(folder / left, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    shown = captions(seconds)
    scenes = [Scene((text,), SCENE_S) for _, text in shown]
    plain = write_video(folder / "plain.mp4", scenes, fps=10, size=(480, 270))
    if espeak_path() is None:
        return plain
    said = [(start + 1.0, f"Here is the {text.split()[0].lower()}.") for start, text in shown]
    speak_over(plain, said, folder / "long.mp4", folder)
    return folder / "long.mp4"


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    cuts = (
        statistics.quantiles(ordered, n=100, method="inclusive")
        if len(ordered) > 1
        else ordered * 99
    )
    return {
        "p50": round(cuts[49], 3),
        "p95": round(cuts[94], 3),
        "max": round(ordered[-1], 3),
    }


async def _watch(
    index: LanceSearchIndex, shown: list[tuple[float, str]], started: float, done: asyncio.Event
) -> dict[str, float]:
    """Seconds from the start until each caption was first found (partial or not)."""
    first: dict[str, float] = {}
    where = SearchFilter(video_id="long")
    while not done.is_set() or len(first) < len(shown):
        for _, text in shown:
            if text in first:
                continue
            hits = await asyncio.to_thread(index.search, text, k=1, where=where, method="text")
            if hits and text in hits[0].text:
                first[text] = time.monotonic() - started
        if done.is_set():
            break
        await asyncio.sleep(0.05)
    return first


async def run(workdir: Path, seconds: float, *, every_s: float | None = None) -> dict[str, Any]:
    """``every_s``: ``runtime.partial_results_every_s`` (None: the service's default)."""
    video = write_long_video(workdir, seconds)
    runtime: dict[str, Any] = {"workdir": str(workdir / "work"), "executor": "local"}
    if every_s is not None:
        runtime["partial_results_every_s"] = every_s
    redis = redis_server(workdir).start()
    try:
        config = ServiceConfig.load(
            redis={"url": f"redis://127.0.0.1:{redis.port}/0", "key_prefix": "progressive"},
            storage={"lance_uri": str(workdir / "lance"), "object_store_uri": str(workdir / "o")},
            limits={"file_roots": (str(workdir),)},
            stages={"sample_fps": 1.0, "chunk_frames": 4},
            runtime=runtime,
        )
        executor, results = LocalExecutor(config), LocalResults(config)
        store = RedisCheckpointStore(config.redis)
        processor = VideoProcessor(
            store=store,
            executor=executor,
            results=results,
            chunks=ChunkStore(LocalObjectStore(config.storage.object_store_uri)),
            lineage=Pipeline.from_config(config).lineage,
            settings=config.runtime,
        )
        index = LanceSearchIndex.from_settings(
            config.storage, text_embedder(config.stages.embed.model)
        )
        shown, done = captions(seconds), asyncio.Event()
        started = time.monotonic()
        watcher = asyncio.create_task(_watch(index, shown, started, done))
        await processor.process(VideoRef("long", video.as_uri()))
        done_s = time.monotonic() - started
        done.set()
        first = await watcher
        lags = list(results.stats.partial_lags_s)
        await executor.close()
        await results.close()
        await store.close()
    finally:
        redis.stop()
    before = [t for t in first.values() if t < done_s]
    return {
        "video_s": seconds,
        "parts": len(lags),
        "chunk_to_searchable_s": _percentiles(lags),
        "chunk_to_searchable_p95_s": _percentiles(lags).get("p95"),
        "done_s": round(done_s, 2),
        "captions": len(shown),
        "captions_found_before_done": len(before),
        "first_caption_found_s": round(min(first.values()), 2) if first else None,
        "mean_lead_before_done_s": round(statistics.fmean(done_s - t for t in before), 2)
        if before
        else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the video")
    parser.add_argument("--workdir", type=Path, help="keep the video and tables here")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="reelsense-progressive-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(run(workdir, args.seconds))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
