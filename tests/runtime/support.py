"""What the runtime tests share: a processor over a test's config, executor and result store,
and short videos with text to process."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from checkpoint.base import VideoState, VideoStatus
from checkpoint.chunk_store import ChunkStore
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from devkit.samples import Scene, write_video
from runtime.executor import StageExecutor
from runtime.processor import VideoProcessor
from runtime.results import ResultStore
from runtime.video_stages import VideoStages
from stages.pipeline import Pipeline
from storage.base import ObjectStore
from storage.local import LocalObjectStore


def processor(
    config: ServiceConfig,
    executor: StageExecutor,
    results: ResultStore,
    store: RedisCheckpointStore,
    *,
    chunks: ObjectStore | None = None,
    **runtime: Any,
) -> VideoProcessor:
    """A processor of ``config`` (its runtime settings changed by ``runtime``), persisting
    chunks in ``chunks`` (default: the configured folder), running the configured video
    stages."""
    pipeline = Pipeline.from_config(config)
    return VideoProcessor(
        store=store,
        executor=executor,
        results=results,
        chunks=ChunkStore(chunks or LocalObjectStore(config.storage.object_store_uri)),
        lineage=pipeline.lineage,
        settings=config.runtime.model_copy(update=runtime),
        video_stages=VideoStages(pipeline.video_stages),
    )


def text_videos(root: Path, names: Iterable[str], seconds: int = 4) -> list[VideoRef]:
    """A video per name (its id), of ``seconds`` one-second scenes showing the name in capitals
    and the scene's number (320x240, 10 fps)."""
    refs = []
    for name in names:
        scenes = [Scene((f"{name.upper()} {i}",), 1.0) for i in range(seconds)]
        path = write_video(root / f"{name}.mp4", scenes, fps=10, size=(320, 240))
        refs.append(VideoRef(name, path.as_uri()))
    return refs


async def all_done(store: RedisCheckpointStore, refs: Iterable[VideoRef]) -> list[VideoStatus]:
    """The records of ``refs``, each asserted done."""
    statuses = []
    for ref in refs:
        status = await store.get(ref.video_id)
        assert status is not None
        assert status.status is VideoState.DONE
        statuses.append(status)
    return statuses
