"""``LocalExecutor``: the stages in this process, run in worker threads (no Ray)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

from core.records import Chunk, VideoRef
from service.executor import ChunkTicket, IngestItem, StageExecutor
from stages.pipeline import Pipeline

_END = object()


class LocalExecutor(StageExecutor):
    """Same stage classes as the Ray pools; one instance of each, shared by all videos."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        self._stages = {stage.name: stage for stage in pipeline.image_stages}
        self.image_stages = tuple(self._stages)
        self.embeds = pipeline.embed is not None
        for stage in pipeline.all_stages():
            stage.setup()

    async def ingest(self, ref: VideoRef) -> AsyncIterator[IngestItem]:
        pipeline = self._pipeline
        video = await asyncio.to_thread(pipeline.fetch.process_batch, [ref])
        yield video[0]
        try:
            chunks: Iterator[Chunk] = pipeline.decode.stream(video[0])
            while (chunk := await asyncio.to_thread(next, chunks, _END)) is not _END:
                assert isinstance(chunk, Chunk)
                yield ChunkTicket(chunk.video_id, chunk.index, len(chunk.frames), chunk.last, chunk)
        finally:
            await asyncio.to_thread(pipeline.fetch.release, video[0])

    async def analyse(self, stage: str, ticket: ChunkTicket) -> Chunk:
        result = await asyncio.to_thread(self._stages[stage].process_batch, [ticket.payload])
        return result[0].without_images()

    async def embed(self, chunk: Chunk) -> Chunk:
        assert self._pipeline.embed is not None
        result = await asyncio.to_thread(self._pipeline.embed.process_batch, [chunk])
        return result[0]

    async def close(self) -> None:
        for stage in self._pipeline.all_stages():
            await asyncio.to_thread(stage.teardown)
