"""The ingest pool: fetch, probe and decode a video in one replica, streaming its chunks."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from core.config import ServiceConfig
from core.records import BULK_LANE, FRESH_LANE, Chunk, LocalVideo, VideoRef, as_lane
from core.stage_names import DECODE, EMBED, FETCH
from runtime.activity import ActivitySnapshot, StageActivity, StageThreads, replica_name
from runtime.executor import (
    FusedChunk,
    FusedOutputs,
    IngestItem,
    PooledChunk,
    closing,
    merge_outputs,
    with_speech,
)
from runtime.pools.base import INGEST, StageRunner, later_stages
from runtime.pools.split import VideoRanges
from stages.pipeline import Pipeline
from stages.sampling import ResumePoint

_END = object()
# How long chunk refs stay held after a video's stream ends: the image stages take the last
# chunks within seconds; a crashed orchestrator's chunks are dropped after this.
_HOLD_AFTER_END_S = 120.0
_CLOSED_KEPT = 10_000


class FreshFirst:
    """Within one ingest replica, a bulk video (``VideoRef.lane``, ``consumers.lanes``)
    decodes its next chunk only while no fresh upload is being ingested here: the fresh video
    gets the replica's core as if the bulk one were not there, and the bulk one goes on from
    where it paused once the fresh one is through. The consumer already keeps bulk work from
    taking a fresh upload's slot; this keeps it from taking its CPU."""

    def __init__(self) -> None:
        self.fresh = 0  # fresh ingest calls under way on this replica
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def call(self, ref: VideoRef) -> AsyncIterator[None]:
        fresh = as_lane(ref.lane) == FRESH_LANE
        self.fresh += fresh
        try:
            yield
        finally:
            if fresh:
                async with self._changed:
                    self.fresh -= 1
                    self._changed.notify_all()

    async def turn(self, ref: VideoRef) -> None:
        if as_lane(ref.lane) == BULK_LANE and self.fresh:
            async with self._changed:
                await self._changed.wait_for(lambda: self.fresh == 0)


@ray.remote(num_cpus=0)
class ChunkCredits:
    """How many chunks each video's decoder may produce: the caller grants more as it takes
    chunks, so decoding runs at most a few chunks ahead of the stages. (A Serve streaming
    call has no backpressure of its own: the replica would decode the whole video into the
    object store however slowly the chunks are taken.)"""

    def __init__(self) -> None:
        self._granted: dict[str, int] = {}
        self._released: dict[str, list[int]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._closed: set[str] = set()
        self._closed_order: deque[str] = deque()

    async def wait(self, key: str, count: int) -> tuple[bool, list[int]]:
        """Until more than ``count`` chunks are granted; then whether the caller is still
        there, and the chunks whose pixels it no longer needs (since the last wait)."""
        while key not in self._closed and self._granted.get(key, 0) <= count:
            await self._changed.setdefault(key, asyncio.Event()).wait()
        return key not in self._closed, self._released.pop(key, [])

    def release(self, key: str, index: int) -> None:
        if key not in self._closed:
            self._released.setdefault(key, []).append(index)

    def grant(self, key: str, total: int) -> None:
        if key not in self._closed:
            self._granted[key] = max(self._granted.get(key, 0), total)
        self._wake(key)

    def close(self, key: str) -> None:
        self._granted.pop(key, None)
        self._released.pop(key, None)
        self._closed.add(key)
        self._closed_order.append(key)
        if len(self._closed_order) > _CLOSED_KEPT:  # a late waiter of an old key is unlikely
            self._closed.discard(self._closed_order.popleft())
        self._wake(key)

    def _wake(self, key: str) -> None:
        event = self._changed.pop(key, None)
        if event is not None:
            event.set()


class IngestPool:
    """Fetch + probe + decode/sample; one generator per video. Fused stages
    (``PoolSettings.fuse``) run here too, on each chunk as it is decoded."""

    def __init__(self, config_json: str) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        pipeline = Pipeline.from_config(config)
        self._fetch = pipeline.fetch
        self._decode = pipeline.decode
        self._speech = pipeline.speech
        self._fetch.setup()
        self._decode.setup()
        self._split_min_s = config.ray.split_min_s
        replica = replica_name(INGEST)
        self._activity = {
            FETCH: StageActivity(FETCH, replica),
            DECODE: StageActivity(DECODE, replica),
        }
        self._image_stages = [stage.name for stage in pipeline.image_stages]
        self._fused = {
            name: StageRunner(stage)
            for name, stage in later_stages(pipeline).items()
            if name in config.ray.fused
        }
        # Chunk refs this replica put, held until the caller releases them (its image stages
        # are done with the pixels) or a while after the video's stream ends: a ref nested in
        # a value a streaming call yields can otherwise be freed before the image stage reads
        # it (Ray loses count of such borrowed refs). Released refs go at once, so what is
        # held stays bounded by the chunks in flight, whatever the length of the video.
        self._held: dict[str, dict[int, ray.ObjectRef[Any]]] = {}
        self._fresh_first = FreshFirst()
        self._threads = StageThreads()  # a video's decoding and fused stages on one thread

    async def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        *,
        credits: Any = None,
        key: str = "",
        inline: tuple[str, ...] = (),
        speech_from: int | None = None,
        split: int = 0,
        end_chunk: int | None = None,
    ) -> AsyncIterator[IngestItem | VideoRanges]:
        """``credits`` (a ``ChunkCredits`` handle) and ``key``: wait for a grant before each
        chunk; None decodes as fast as it can. ``inline``: fused stages to run on each chunk
        (the image stages first, then the embedder). ``speech_from``: recognise the audio
        track's speech from that window on, here, beside decoding; None: none.

        ``split``: cut the video into up to that many ranges (``stages.ranges``); the ranges
        after the first follow the video as ``VideoRanges``, for the caller to have other
        replicas decode, and this call decodes the first. ``end_chunk``: decode only the
        chunks before it (a range)."""
        async with self._fresh_first.call(ref):
            with self._activity[FETCH].working(1) as work:
                video = (await work.in_thread(self._fetch.process_batch, [ref]))[0]
            yield video
            hold = uuid.uuid4().hex
            held: dict[int, ray.ObjectRef[Any]] = {}
            self._held[hold] = held
            try:
                if split > 1:
                    ranges = await asyncio.to_thread(
                        self._decode.ranges, video, resume, split, self._split_min_s
                    )
                    if len(ranges) > 1:
                        yield VideoRanges(tuple(ranges[1:]))
                        end_chunk = ranges[0].end_chunk
                listens = self._speech is not None and speech_from is not None
                with self._threads.for_video(listens) as (thread, listener):
                    tickets = self._tickets(
                        video,
                        resume,
                        end_chunk,
                        credits=credits,
                        key=key,
                        inline=inline,
                        held=held,
                        thread=thread,
                    )
                    stream = with_speech(tickets, self._speech, video, speech_from, listener)
                    async with closing(stream):
                        async for item in stream:
                            yield item
            finally:
                asyncio.get_running_loop().call_later(_HOLD_AFTER_END_S, self._held.pop, hold, None)
                await asyncio.to_thread(self._fetch.release, video)

    async def _tickets(
        self,
        video: LocalVideo,
        resume: ResumePoint | None,
        end_chunk: int | None,
        *,
        credits: Any,
        key: str,
        inline: tuple[str, ...],
        held: dict[int, ray.ObjectRef[Any]],
        thread: ThreadPoolExecutor,
    ) -> AsyncIterator[PooledChunk | FusedChunk]:
        chunks: Iterator[Chunk] = self._decode.stream_from(video, resume, end_chunk)
        produced = 0
        while credits is None or await self._granted(credits, key, produced, held):
            await self._fresh_first.turn(video.ref)
            chunk = await self._next_chunk(chunks, thread)
            if chunk is None:
                return
            yield await self._ticket(chunk, inline, held, thread)
            produced += 1

    @staticmethod
    async def _granted(
        credits: Any, key: str, produced: int, held: dict[int, ray.ObjectRef[Any]]
    ) -> bool:
        """Wait for a grant of one more chunk; whether the caller still wants chunks. The
        refs of the chunks it has released since go."""
        still_wanted, released = await credits.wait.remote(key, produced)
        for index in released:
            held.pop(index, None)
        return bool(still_wanted)

    async def _next_chunk(
        self, chunks: Iterator[Chunk], thread: ThreadPoolExecutor
    ) -> Chunk | None:
        with self._activity[DECODE].working(thread=thread) as work:
            chunk = await work.in_thread(next, chunks, _END)
            if not isinstance(chunk, Chunk):
                return None
            work.items = len(chunk.frames)
        return chunk

    async def _ticket(
        self,
        chunk: Chunk,
        inline: tuple[str, ...],
        held: dict[int, ray.ObjectRef[Any]],
        thread: ThreadPoolExecutor,
    ) -> PooledChunk | FusedChunk:
        """The chunk's ticket: its pixels put in the object store unless every image stage
        ran here, on it, already."""
        fused = await self._run_inline(chunk, inline, thread) if inline else None
        if fused is not None and set(self._image_stages) <= fused.stages:
            return FusedChunk(chunk.video_id, chunk.index, len(chunk.frames), chunk.last, fused)
        held[chunk.index] = pixels = ray.put(chunk)
        return PooledChunk(
            chunk.video_id, chunk.index, len(chunk.frames), chunk.last, pixels, fused=fused
        )

    async def _run_inline(
        self, chunk: Chunk, inline: tuple[str, ...], thread: ThreadPoolExecutor
    ) -> FusedOutputs:
        seconds: dict[str, float] = {}

        async def run(name: str, on: Chunk) -> Chunk:
            started = time.monotonic()
            done = await self._fused[name].run_one(on, thread=thread)
            seconds[name] = time.monotonic() - started
            return done

        image = [name for name in inline if name != EMBED]
        outputs = [await run(name, chunk) for name in image]
        # Repeated samples take their originals' findings before they are embedded.
        fields = tuple(field for name in image for field in self._fused[name].stage.fills)
        analysed = merge_outputs(outputs, fields).with_repeats_filled(fields)
        if EMBED in inline:
            analysed = await run(EMBED, analysed)
        return FusedOutputs(frozenset(inline), analysed, seconds)

    async def analyse(self, stage: str, item: PooledChunk | Chunk) -> Chunk:
        """A fused stage on one chunk, called as a pool's would be (when a video reuses some
        outputs of an earlier result, the stages left run on their own)."""
        return await self._fused[stage].run_one(item)

    def activity(self, since: int = 0) -> list[ActivitySnapshot]:
        runners = self._fused.values()
        activities = [*self._activity.values(), *(runner.activity for runner in runners)]
        return [activity.snapshot(since) for activity in activities]

    def held(self) -> int:
        """Chunk refs this replica holds (pixels in the object store kept for readers)."""
        return sum(len(held) for held in self._held.values())

    def __del__(self) -> None:
        self._threads.close()
        for runner in self._fused.values():
            runner.stage.teardown()
        if self._speech is not None:
            self._speech.teardown()
