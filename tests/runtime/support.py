"""What the runtime tests share: a processor over a test's config and executor."""

from __future__ import annotations

from typing import Any

from checkpoint.chunk_store import ChunkStore
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from runtime.executor import StageExecutor
from runtime.processor import VideoProcessor
from stages.pipeline import Pipeline
from storage.base import ObjectStore
from storage.local import LocalObjectStore


def processor(
    config: ServiceConfig,
    executor: StageExecutor,
    store: RedisCheckpointStore,
    *,
    chunks: ObjectStore | None = None,
    **runtime: Any,
) -> VideoProcessor:
    """A processor of ``config`` (its runtime settings changed by ``runtime``), persisting
    chunks in ``chunks`` (default: the configured folder)."""
    return VideoProcessor(
        store=store,
        executor=executor,
        chunks=ChunkStore(chunks or LocalObjectStore(config.storage.object_store_uri)),
        lineage=Pipeline.from_config(config).lineage,
        settings=config.runtime.model_copy(update=runtime),
    )
