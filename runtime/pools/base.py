"""What the pools share: the names they deploy under, and a stage run inside a replica."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from core.errors import ReelsenseError
from core.records import Chunk
from runtime.activity import StageActivity, StageThreads, replica_name
from runtime.executor import PooledChunk
from stages.base import Stage, process_each
from stages.pipeline import Pipeline

POOLS_APP = "reelsense-pools"
INGEST = "ingest"
WRITER = "sink-writer"

#: One item's outcome: its chunk, or its own error.
Outcome = Chunk | Exception


class StageRunner:
    """One stage set up in a replica, with its activity."""

    def __init__(self, stage: Stage[Chunk, Chunk]) -> None:
        self.stage = stage
        stage.setup()
        self.activity = StageActivity(stage.name, replica_name(stage.name))
        self._threads = StageThreads()

    async def run(
        self, items: Sequence[PooledChunk | Chunk], *, thread: ThreadPoolExecutor | None = None
    ) -> list[Outcome]:
        """The stage on the chunks (a ticket's pixels read from the object store), an outcome
        per item: a chunk without pixels, or that item's own error (blamed on the stage).
        ``thread``: the caller's (a video's lease, ``StageThreads``); else one of this
        runner's own, the one its last call ran on when it is free."""
        read = await asyncio.gather(*(_pixels(item) for item in items))
        chunks = [chunk for chunk in read if isinstance(chunk, Chunk)]
        frames = sum(len(chunk.frames) for chunk in chunks)
        lease = self._threads.lease() if thread is None else contextlib.nullcontext(thread)
        with lease as leased, self.activity.working(frames, thread=leased) as work:
            done = iter(await work.in_thread(process_each, self.stage, chunks))
        outcomes = [next(done) if isinstance(chunk, Chunk) else chunk for chunk in read]
        for outcome in outcomes:
            if isinstance(outcome, ReelsenseError):
                outcome.with_stage(self.stage.name)
        return [o.without_images() if isinstance(o, Chunk) else o for o in outcomes]

    async def run_async(
        self, item: PooledChunk | Chunk, process: Callable[[Chunk], Awaitable[Chunk]]
    ) -> Chunk:
        """One chunk through the stage's own async ``process`` (an engine that batches by
        itself); its error raised, blamed on the stage."""
        chunk = unwrap(await _pixels(item))
        with self.activity.working(len(chunk.frames)):
            try:
                done = await process(chunk)
            except ReelsenseError as exc:
                exc.with_stage(self.stage.name)
                raise
        return done.without_images()

    async def run_one(
        self, item: PooledChunk | Chunk, *, thread: ThreadPoolExecutor | None = None
    ) -> Chunk:
        """The stage on one chunk (on ``thread``, as ``run``); its error raised."""
        (outcome,) = await self.run([item], thread=thread)
        return unwrap(outcome)


def unwrap(outcome: Outcome) -> Chunk:
    """The chunk, or its error raised."""
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


async def _pixels(item: PooledChunk | Chunk) -> Outcome:
    """The chunk with its pixels, or why they could not be read (an object lost with the
    replica that put it fails that chunk only)."""
    if isinstance(item, Chunk):
        return item
    if isinstance(item.pixels, Chunk):
        return item.pixels
    try:
        pixels: Chunk = await item.pixels
    except Exception as exc:
        return exc
    return pixels


def later_stages(pipeline: Pipeline) -> dict[str, Stage[Chunk, Chunk]]:
    """The image stages and the embedder of the pipeline, by name."""
    stages: dict[str, Stage[Chunk, Chunk]] = {s.name: s for s in pipeline.image_stages}
    if pipeline.embed is not None:
        stages[pipeline.embed.name] = pipeline.embed
    return stages
