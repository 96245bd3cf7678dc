"""``LocalExecutor``: the stages in this process, run in worker threads (no Ray).

Each stage call takes one chunk of one video (nothing batches chunks of several videos here),
so a stage's error is always that chunk's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterator, Sequence

from core.config import ServiceConfig
from core.records import Chunk, EarlierResult, LocalVideo, VideoRef, VideoResult
from runtime.executor import IngestItem, PooledChunk, StageExecutor, with_speech
from runtime.result_writer import FencedResultWriter
from sinks.writer import WriterStats
from stages.pipeline import Pipeline
from stages.sampling import ResumePoint

_END = object()


class LocalExecutor(StageExecutor):
    """Same stage classes as the Ray pools; one instance of each, shared by all videos."""

    def __init__(self, config: ServiceConfig) -> None:
        self._pipeline = pipeline = Pipeline.from_config(config)
        self._stages = {stage.name: stage for stage in pipeline.image_stages}
        self.image_stages = tuple(self._stages)
        self.embeds = pipeline.embed is not None
        self._writer = FencedResultWriter(config)
        for stage in pipeline.all_stages():
            stage.setup()

    @property
    def writer_stats(self) -> WriterStats:
        """What the one writer has done so far (batches, parts and their lags)."""
        return self._writer.stats

    async def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        inline: Collection[str] = (),
        speech_from: int | None = None,
    ) -> AsyncIterator[IngestItem]:
        pipeline = self._pipeline
        video = (await asyncio.to_thread(pipeline.fetch.process_batch, [ref]))[0]
        yield video
        try:
            tickets = self._tickets(video, resume)
            async for item in with_speech(tickets, pipeline.speech, video, speech_from):
                yield item
        finally:
            await asyncio.to_thread(pipeline.fetch.release, video)

    async def _tickets(
        self, video: LocalVideo, resume: ResumePoint | None
    ) -> AsyncIterator[PooledChunk]:
        chunks: Iterator[Chunk] = self._pipeline.decode.stream_from(video, resume)
        while (chunk := await asyncio.to_thread(next, chunks, _END)) is not _END:
            assert isinstance(chunk, Chunk)
            yield PooledChunk(
                chunk.video_id, chunk.index, len(chunk.frames), chunk.last, pixels=chunk
            )

    async def analyse(self, stage: str, ticket: PooledChunk) -> Chunk:
        assert isinstance(ticket.pixels, Chunk)  # in this process, the chunk itself
        result = await asyncio.to_thread(self._stages[stage].process_batch, [ticket.pixels])
        return result[0].without_images()

    async def embed(self, chunk: Chunk) -> Chunk:
        assert self._pipeline.embed is not None
        result = await asyncio.to_thread(self._pipeline.embed.process_batch, [chunk])
        return result[0]

    async def write(self, result: VideoResult) -> None:
        await self._writer.write(result)

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        await self._writer.write_partial(parts)

    async def drop_partial(self, video_id: str) -> None:
        await self._writer.drop_partial(video_id)

    async def earlier(self, video_id: str) -> EarlierResult | None:
        return await self._writer.earlier(video_id)

    async def close(self) -> None:
        for stage in self._pipeline.all_stages():
            await asyncio.to_thread(stage.teardown)
        await self._writer.close()
