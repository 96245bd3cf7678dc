"""What follows decoding on one chunk (image stages, embedder, chunk checkpoint), and where
decoding resumes and how many videos decode at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection

from checkpoint.base import CheckpointStore
from checkpoint.chunk_store import ChunkStore, chunk_origin
from core.errors import RetryableError
from core.records import BULK_LANE, FRESH_LANE, Chunk, Lane, as_lane
from core.stage_names import EMBED
from runtime.executor import (
    ChunkTicket,
    FusedChunk,
    IngestChunk,
    IngestItem,
    PooledChunk,
    ReplayedChunk,
    StageExecutor,
    closing,
    merge_outputs,
)
from runtime.reuse import ReusePlan
from runtime.video_run import VideoRun
from stages.pipeline import Lineage
from stages.sampling import ResumePoint

log = logging.getLogger(__name__)


class ChunkStages:
    """Takes one chunk of the ingest stream to persisted: the image stages' outputs (from
    their pools, from the decoder, or from an earlier result), then the embeddings, then the
    chunk's outputs and its checkpoint."""

    def __init__(
        self,
        executor: StageExecutor,
        store: CheckpointStore,
        chunks: ChunkStore | None,
        lineage: Lineage,
    ) -> None:
        """``chunks``: where chunk outputs are persisted; None persists nothing per chunk."""
        self._executor = executor
        self._store = store
        self._chunks = chunks
        self._version = lineage.version
        self._analysed_fields = lineage.analysed_fields

    async def restore(self, run: VideoRun) -> dict[int, Chunk]:
        """Chunks an earlier attempt persisted, read back and recorded as restored."""
        if self._chunks is None:
            return {}
        video_id = run.ref.video_id
        indexes = await self._store.chunks_done(video_id)
        # Chunks persisted but not recorded: the process died in between, or Redis lost them.
        indexes |= await asyncio.to_thread(self._chunks.indexes, video_id, self._version)
        restored: dict[int, Chunk] = {}
        origin = chunk_origin(run.ref)  # another tenant's or source's chunks stay unread
        for index in sorted(indexes):
            chunk = await asyncio.to_thread(
                self._chunks.get, video_id, self._version, index, origin
            )
            if chunk is not None:
                restored[index] = chunk
        for chunk in restored.values():
            run.restored(chunk)
            await self._store.mark_chunk(
                video_id, run.epoch, chunk.index, restored=True, total=run.total
            )
        if restored:
            log.info("video %s: resuming with %d chunks already done", video_id, len(restored))
            for stage in (
                *self._executor.image_stages,
                *([EMBED] if self._executor.embeds else []),
            ):
                await run.progress(stage, len(restored), run.total)
                run.done[stage] = len(restored)
        return restored

    async def run(self, run: VideoRun, ticket: IngestChunk, reuse: ReusePlan) -> Chunk:
        chunk = await self._analysed(run, ticket, reuse)
        chunk = chunk.with_repeats_filled(self._analysed_fields)
        for stage in self._executor.image_stages:
            await run.stage_done(stage)
        chunk = await self._embedded(run, ticket, chunk, reuse)
        await self._persist(run, chunk)
        return chunk

    async def _analysed(self, run: VideoRun, ticket: IngestChunk, reuse: ReusePlan) -> Chunk:
        """The chunk with the outputs of every image stage, without pixels."""
        if isinstance(ticket, ReplayedChunk):
            return _filled(reuse, ticket.chunk)
        if isinstance(ticket, FusedChunk):
            run.record_fused(ticket.fused, ticket.frames)
            return _filled(reuse, ticket.fused.chunk)
        try:
            return await self._pooled(run, ticket, reuse)
        finally:
            self._executor.release(ticket)

    async def _pooled(self, run: VideoRun, ticket: PooledChunk, reuse: ReusePlan) -> Chunk:
        """The image stages left on a chunk's pixels, merged with what the decoder's stages
        found and what is taken from the earlier result."""
        if ticket.fused is not None:
            run.record_fused(ticket.fused, ticket.frames)
        image_stages = self._executor.image_stages
        left = [s for s in image_stages if s not in reuse.stages and s not in ticket.applied]
        outputs = await self._analyse(run, ticket, left)
        if ticket.fused is not None:
            outputs.append(ticket.fused.chunk)
        chunk = reuse.fill(merge_outputs(outputs, self._analysed_fields))
        if chunk is None:  # the earlier result lacks a frame of this chunk: compute all
            extra = await self._analyse(run, ticket, sorted(reuse.stages))
            chunk = merge_outputs([*outputs, *extra], self._analysed_fields)
        return chunk

    async def _analyse(
        self, run: VideoRun, ticket: PooledChunk, stages: Collection[str]
    ) -> list[Chunk]:
        return await asyncio.gather(
            *(
                run.timed(stage, self._executor.analyse(stage, ticket), ticket.frames)
                for stage in stages
            )
        )

    async def _embedded(
        self, run: VideoRun, ticket: IngestChunk, chunk: Chunk, reuse: ReusePlan
    ) -> Chunk:
        """The chunk embedded (unless the decoder did it, or its embeddings are taken from the
        earlier result); as it is without an embedder."""
        if not self._executor.embeds:
            return chunk
        # Taken only if they were: a chunk whose frames the earlier result lacked is analysed
        # afresh, text and all.
        taken = reuse.embeddings and all(f.embedding is not None for f in chunk.frames if f.text)
        if EMBED not in ticket.applied and not taken:
            chunk = await run.timed(EMBED, self._executor.embed(chunk), ticket.frames)
        await run.stage_done(EMBED)
        return chunk

    async def _persist(self, run: VideoRun, chunk: Chunk) -> None:
        """The chunk's outputs, then its checkpoint: a recorded chunk is always stored."""
        if self._chunks is None:
            return
        await asyncio.to_thread(self._chunks.put, self._version, chunk, chunk_origin(run.ref))
        await self._store.mark_chunk(
            run.ref.video_id, run.epoch, chunk.index, restored=False, total=run.total
        )


def _filled(reuse: ReusePlan, chunk: Chunk) -> Chunk:
    """A chunk that needs no more image stages, with what is taken from the earlier result.
    Its frames are always there: a replayed chunk is cut from them, and a chunk analysed
    entirely in the decoder has no reused stage (reused stages never run there)."""
    filled = reuse.fill(chunk)
    if filled is None:
        raise RetryableError(
            f"chunk {chunk.index}: frames missing from the earlier result", code="internal_error"
        )
    return filled


class DecodeSlots:
    """How many videos of this process decode at once (``runtime.videos_decoding``), fresh
    uploads first: a fresh video waits for a slot only while fresh videos hold them all; one
    held by bulk work (``VideoRef.lane``) it does without (the bulk video pauses its decoder
    while a fresh one is ingested on its replica, ``runtime.pools.ingest.FreshFirst``)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.held: dict[Lane, int] = {FRESH_LANE: 0, BULK_LANE: 0}
        self._released = asyncio.Event()

    async def acquire(self, lane: str) -> None:
        while True:
            self._released.clear()  # before the check: a release after it wakes the wait
            if self._free(as_lane(lane)):
                break
            await self._released.wait()
        self.held[as_lane(lane)] += 1

    def release(self, lane: str) -> None:
        self.held[as_lane(lane)] -= 1
        self._released.set()

    def _free(self, lane: Lane) -> bool:
        return sum(self.held.values()) < self.slots or (
            lane == FRESH_LANE and self.held[BULK_LANE] > 0
        )


async def decoding(
    items: AsyncIterator[IngestItem], slots: DecodeSlots, lane: str, *, listens: bool
) -> AsyncIterator[IngestItem]:
    """The ingest stream, holding one of the decode slots until it ends; until its last chunk
    when it ``listens`` (speech recognition may go on after the decoding). Held to the end
    otherwise: the next video's call, made while this one's is still open, would find both
    ingest replicas at work in Serve's router, and go to the busy one half the time."""
    await slots.acquire(lane)
    held = True
    try:
        async with closing(items):
            async for item in items:
                if listens and held and isinstance(item, ChunkTicket) and item.last:
                    held = False
                    slots.release(lane)
                yield item
    finally:
        if held:
            slots.release(lane)


def resume_point(restored: dict[int, Chunk]) -> ResumePoint | None:
    """After the last of the chunks persisted without a gap from the start."""
    previous: Chunk | None = None
    while (previous.index + 1 if previous else 0) in restored:
        previous = restored[previous.index + 1 if previous else 0]
    if previous is None or not previous.frames:
        return None
    last = previous.frames[-1]
    return ResumePoint(previous.index + 1, last.index + 1, last.timestamp_s, finished=previous.last)
