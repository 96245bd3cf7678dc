"""``LocalExecutor``: the stages in this process, run in worker threads (no Ray).

Each stage call takes one chunk of one video (nothing batches chunks of several videos here),
so a stage's error is always that chunk's own. A video's decoding and its chunks' stages run on
one thread leased for it (``runtime.activity.StageThreads``, as in an ingest replica), one call
after another as in a process of its own; its speech recognition on a second lease beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor

from core.config import ServiceConfig
from core.records import Chunk, LocalVideo, VideoRef
from runtime.activity import StageThreads, run_on
from runtime.executor import IngestItem, PooledChunk, StageExecutor, closing, with_speech
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
        self._threads = StageThreads()
        # video id -> the thread its decoding ran on, kept until that thread serves another
        # video: the stages of a video's last chunks run after its decoding has ended.
        self._thread_of: dict[str, ThreadPoolExecutor] = {}
        for stage in pipeline.all_stages():
            stage.setup()

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
            listens = pipeline.speech is not None and speech_from is not None
            with self._threads.for_video(listens) as (thread, listener):
                self._thread_of = {v: t for v, t in self._thread_of.items() if t is not thread}
                self._thread_of[ref.video_id] = thread
                tickets = self._tickets(video, resume, thread)
                stream = with_speech(tickets, pipeline.speech, video, speech_from, listener)
                async with closing(stream):
                    async for item in stream:
                        yield item
        finally:
            await asyncio.to_thread(pipeline.fetch.release, video)

    async def _tickets(
        self, video: LocalVideo, resume: ResumePoint | None, thread: ThreadPoolExecutor
    ) -> AsyncIterator[PooledChunk]:
        chunks: Iterator[Chunk] = self._pipeline.decode.stream_from(video, resume)
        while (chunk := await run_on(thread, next, chunks, _END)) is not _END:
            assert isinstance(chunk, Chunk)
            yield PooledChunk(
                chunk.video_id, chunk.index, len(chunk.frames), chunk.last, pixels=chunk
            )

    async def analyse(self, stage: str, ticket: PooledChunk) -> Chunk:
        assert isinstance(ticket.pixels, Chunk)  # in this process, the chunk itself
        thread = self._thread_of.get(ticket.video_id)
        result = await run_on(thread, self._stages[stage].process_batch, [ticket.pixels])
        return result[0].without_images()

    async def embed(self, chunk: Chunk) -> Chunk:
        assert self._pipeline.embed is not None
        thread = self._thread_of.get(chunk.video_id)
        result = await run_on(thread, self._pipeline.embed.process_batch, [chunk])
        return result[0]

    async def close(self) -> None:
        for stage in self._pipeline.all_stages():
            await asyncio.to_thread(stage.teardown)
        self._threads.close()
        self._thread_of.clear()
