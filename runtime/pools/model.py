"""The model pools (OCR, VLM, embeddings) and the sink writer pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from core.config import ServiceConfig
from core.records import Chunk, EarlierResult, VideoRef, VideoResult
from runtime.activity import ActivitySnapshot
from runtime.executor import PooledChunk
from runtime.pools.base import Outcome, StageRunner, later_stages, unwrap
from runtime.result_writer import FencedResultWriter
from stages.pipeline import Pipeline
from stages.vlm import VlmStage


class ModelPool:
    """One model stage (OCR, VLM, embeddings), batching chunks of many videos together; or,
    for an engine that batches continuously by itself (vLLM's async engine), handing it each
    chunk as it arrives."""

    def __init__(self, config_json: str, stage: str) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        built = later_stages(Pipeline.from_config(config))[stage]
        self._continuous: VlmStage | None = None
        if isinstance(built, VlmStage) and built.batches_continuously:
            built.serve_continuously()
            self._continuous = built
        self._runner = StageRunner(built)
        pool = config.ray.pool(stage)
        self._batch.set_max_batch_size(pool.max_batch_size)  # type: ignore[attr-defined]
        self._batch.set_batch_wait_timeout_s(pool.batch_wait_timeout_s)  # type: ignore[attr-defined]

    async def process(self, item: PooledChunk | Chunk) -> Chunk:
        """The stage on one chunk, in a batch with other callers' chunks: only this chunk's
        own error is raised here, never that of another chunk of the batch."""
        if self._continuous is not None:
            return await self._runner.run_async(item, self._continuous.process_async)
        return unwrap(await self._batch(item))

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.02)  # type: ignore[untyped-decorator]
    async def _batch(self, items: list[PooledChunk | Chunk]) -> list[Outcome]:
        # Outcomes, not a raise: Serve would set one exception on every caller of the batch.
        return await self._runner.run(items)

    def activity(self, since: int = 0) -> list[ActivitySnapshot]:
        return [self._runner.activity.snapshot(since)]

    def __del__(self) -> None:
        self._runner.stage.teardown()


class SinkWriterPool:
    """The one writer of the Lance tables (a single replica): many videos per commit. It
    writes and serves the stored results (``runtime.pools.results.RayResults`` calls it), and
    nothing else; it is the ingress of the pools application only so that Serve deploys the
    stage pools bound to it."""

    def __init__(self, config_json: str, *pools: DeploymentHandle[Any]) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        self._writer = FencedResultWriter(config)

    async def write(self, result: VideoResult) -> None:
        await self._writer.write(result)

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        await self._writer.write_partial(parts)

    async def drop_partial(self, video_id: str) -> None:
        await self._writer.drop_partial(video_id)

    async def earlier(self, video_id: str) -> EarlierResult | None:
        return await self._writer.earlier(video_id)

    async def forget(self, videos: Sequence[VideoRef]) -> None:
        await self._writer.forget(videos)

    async def __del__(self) -> None:
        await self._writer.close()
