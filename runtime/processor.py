"""Per-video orchestration: one asyncio task per video, many videos at once.

For each video: claim it (owner epoch), fetch + probe, stream chunks out of the decoder, run
the image stages side by side on each chunk and then the embedder, persist each chunk's outputs
and record it done, write the results to the sinks, and only then mark the video done (with its
outbox entry). Durable steps go in one order: chunk outputs before the chunk checkpoint, sinks
before the video checkpoint, and (by the consumer) the Kafka offset last.

An attempt that finds chunks persisted by an earlier one takes them as they are and makes the
decoder seek to the first unfinished chunk: a video 95% through resumes at 95%.

A video done under an earlier pipeline version and processed again under a new one recomputes
only the stages whose version changed (see ``stages.pipeline.Lineage``): the outputs of the
others come from its earlier result, and when no image stage changed nothing is decoded at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from checkpoint.base import CheckpointStore, OutboxEvent
from checkpoint.chunk_store import ChunkStore
from checkpoint.errors import StaleEpoch
from core.config import RuntimeSettings
from core.errors import PermanentError, ReelsenseError, RetryableError
from core.records import Chunk, EarlierResult, Frame, LocalVideo, ProbeInfo, VideoRef, VideoResult
from runtime.executor import ChunkTicket, IngestItem, StageExecutor, merge_outputs
from runtime.metrics import PipelineMetrics
from stages.decode import ResumePoint
from stages.pipeline import Lineage

log = logging.getLogger(__name__)

FETCH = "fetch"
DECODE = "decode"
EMBED = "embed"


class VideoProcessor:
    """Takes a video from claim to done (or failed with a reason)."""

    def __init__(
        self,
        *,
        store: CheckpointStore,
        executor: StageExecutor,
        chunks: ChunkStore,
        lineage: Lineage,
        settings: RuntimeSettings,
        metrics: PipelineMetrics | None = None,
    ) -> None:
        self._metrics = metrics or PipelineMetrics()
        self._store = store
        self._executor = executor
        self._chunks = chunks
        self._lineage = lineage
        self._version = lineage.version
        self._settings = settings
        self._chunk_slots = asyncio.Semaphore(settings.chunks_in_flight)
        self._decode_slots = (
            asyncio.Semaphore(settings.videos_decoding) if settings.videos_decoding else None
        )

    @property
    def pipeline_version(self) -> str:
        return self._version

    async def process(self, ref: VideoRef) -> None:
        """Returns once the video's outcome is durable: done, failed, skipped or owned by a
        newer attempt. Raises only ``RetryableError`` when even recording a failure failed
        (the checkpoint store is down): the offset must then not move."""
        self._metrics.video_started()
        started, outcome = time.monotonic(), "error"
        try:
            outcome = await self._process(ref)
        finally:
            self._metrics.video_finished(outcome, time.monotonic() - started)

    async def _process(self, ref: VideoRef) -> str:
        await self._store.mark_queued(ref, self._version)
        last_error: ReelsenseError | None = None
        for attempt in range(self._settings.max_attempts):
            claim = await self._store.claim(ref, self._version)
            if claim.skip:
                log.info("video %s already done for %s, skipping", ref.video_id, self._version)
                return "skipped"
            try:
                await self._run(ref, claim.epoch, fresh=claim.status.attempts == 1)
                return "done"
            except StaleEpoch:
                log.warning("video %s is owned by a newer attempt; leaving it", ref.video_id)
                return "stale"
            except PermanentError as exc:
                await self._fail(ref, claim.epoch, exc, stage=getattr(exc, "stage", None))
                return "failed"
            except RetryableError as exc:
                last_error = exc
                delay = exc.retry_after or self._backoff(attempt)
                log.warning(
                    "video %s attempt %d failed (%s: %s); retry in %.1fs",
                    ref.video_id,
                    attempt + 1,
                    exc.code,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
            except Exception as exc:  # a bug or a lost worker: retry, then fail visibly
                last_error = ReelsenseError(f"{type(exc).__name__}: {exc}", code="internal_error")
                log.exception("video %s attempt %d crashed", ref.video_id, attempt + 1)
                await asyncio.sleep(self._backoff(attempt))
        assert last_error is not None
        claim = await self._store.claim(ref, self._version)
        if claim.skip:
            return "skipped"
        await self._fail(ref, claim.epoch, last_error, stage=None)
        return "failed"

    def _backoff(self, attempt: int) -> float:
        schedule = self._settings.retry_backoff_s
        return schedule[min(attempt, len(schedule) - 1)] if schedule else 0.0

    async def _run(self, ref: VideoRef, epoch: int, *, fresh: bool) -> None:
        earlier = await self._executor.earlier(ref.video_id)
        if fresh and earlier is not None and earlier.pipeline_version == self._version:
            # The checkpoint record is new but the sinks hold this version's results: Redis
            # lost its state after the video was done. Rebuild the record, do not recompute.
            log.warning("video %s: results found in the sinks, marking done", ref.video_id)
            count = earlier.frame_count
            await self._store.mark_done(
                ref.video_id,
                epoch,
                frames=count,
                timings={},
                outbox=self._outbox("video.done", ref, {"frames": count}),
            )
            return
        reuse = _Reuse.plan(self._lineage, ref, earlier, self._executor.image_stages)
        if reuse.stages:
            log.info(
                "video %s: taking %s from its result under %s",
                ref.video_id,
                ", ".join(sorted(reuse.stages)),
                earlier.pipeline_version if earlier else "-",
            )
        started = time.monotonic()
        run = _VideoRun(ref, epoch, self._store, self._metrics)
        checkpoints = self._settings.chunk_checkpoints
        restored = await self._restore(run) if checkpoints else {}
        video: LocalVideo | None = None
        tasks: list[asyncio.Task[Chunk]] = []
        per_video = asyncio.Semaphore(self._settings.chunks_in_flight_per_video)
        if reuse.needs_pixels(self._executor.image_stages):
            items = self._executor.ingest(ref, _resume_point(restored), self._inline(reuse))
            if self._decode_slots is not None:
                items = self._decoding(items, self._decode_slots)
        else:
            items = reuse.replay(ref)
        try:
            async for item in items:
                if isinstance(item, LocalVideo):
                    video = item
                    run.timings[FETCH] = time.monotonic() - started
                    await run.progress(FETCH, 1, 1)
                    continue
                run.decoded(item.index, item.last)
                await run.progress(DECODE, run.decoded_count, run.total)
                if item.index in restored:
                    continue  # finished by an earlier attempt; its pixels are not needed
                await per_video.acquire()
                await self._chunk_slots.acquire()
                self._metrics.chunk_started(item.frames)
                tasks.append(asyncio.create_task(self._chunk(run, item, per_video, reuse)))
            computed = await asyncio.gather(*tasks)
        except BaseException as exc:
            if isinstance(exc, PermanentError) and getattr(exc, "stage", None) is None:
                # From the ingest stream: fetch/probe until the video is open, then decode.
                exc.stage = DECODE if video is not None else FETCH  # type: ignore[attr-defined]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if video is None:
            raise RetryableError(
                "the decoder ended without probing the video", code="internal_error"
            )
        run.timings["total"] = time.monotonic() - started
        chunks = sorted([*restored.values(), *computed], key=lambda c: c.index)
        frames = [frame for chunk in chunks for frame in chunk.frames]
        result = VideoResult(
            ref=ref,
            pipeline_version=self._version,
            probe=video.probe,
            frames=frames,
            completed_at=datetime.now(UTC),
            timings=dict(run.timings),
            epoch=epoch,
            stage_versions=self._lineage.versions,
        )
        await self._executor.write(result)
        await self._store.mark_done(
            ref.video_id,
            epoch,
            frames=len(frames),
            timings=result.timings,
            outbox=self._outbox("video.done", ref, _done_data(result)),
        )
        await self._drop_chunks(ref.video_id)

    def _inline(self, reuse: _Reuse) -> tuple[str, ...]:
        """The stages to run inside the decoder: those it can run of the image stages to
        compute, and the embedder when every image stage runs there and nothing is reused
        (reused outputs are filled in here, before embedding)."""
        executor = self._executor
        computed = [s for s in executor.image_stages if s not in reuse.stages]
        inline = [s for s in computed if s in executor.inline]
        if (
            executor.embeds
            and EMBED in executor.inline
            and not reuse.stages
            and len(inline) == len(computed)
        ):
            inline.append(EMBED)
        return tuple(inline)

    @staticmethod
    async def _decoding(
        items: AsyncIterator[IngestItem], slots: asyncio.Semaphore
    ) -> AsyncIterator[IngestItem]:
        """The ingest stream, holding one of the decode slots until its last chunk."""
        await slots.acquire()
        held = True
        try:
            async for item in items:
                if held and isinstance(item, ChunkTicket) and item.last:
                    slots.release()
                    held = False
                yield item
        finally:
            if held:
                slots.release()

    async def _drop_chunks(self, video_id: str) -> None:
        """Remove the video's persisted chunks once its outcome is final."""
        if not self._settings.chunk_checkpoints:
            return
        try:
            await asyncio.to_thread(self._chunks.delete_video, video_id, self._version)
        except ReelsenseError as exc:  # only space is lost
            log.warning("video %s: persisted chunks not removed: %s", video_id, exc)

    async def _restore(self, run: _VideoRun) -> dict[int, Chunk]:
        """Chunks an earlier attempt persisted, read back and recorded as restored."""
        video_id = run.ref.video_id
        indexes = await self._store.chunks_done(video_id)
        # Chunks persisted but not recorded: the process died in between, or Redis lost them.
        indexes |= await asyncio.to_thread(self._chunks.indexes, video_id, self._version)
        restored: dict[int, Chunk] = {}
        for index in sorted(indexes):
            chunk = await asyncio.to_thread(self._chunks.get, video_id, self._version, index)
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

    async def _chunk(
        self, run: _VideoRun, ticket: ChunkTicket, slot: asyncio.Semaphore, reuse: _Reuse
    ) -> Chunk:
        try:
            image_stages = self._executor.image_stages
            for stage, seconds in ticket.seconds.items():
                run.record(stage, seconds, ticket.frames)
            try:
                outputs = await self._analyse(
                    run,
                    ticket,
                    [s for s in image_stages if s not in reuse.stages and s not in ticket.applied],
                )
                if ticket.analysed is not None:
                    outputs.append(ticket.analysed)
                # Without any stage to run, the ticket is a chunk replayed from the earlier
                # result.
                chunk = reuse.fill(merge_outputs(outputs) if outputs else ticket.payload)
                if chunk is None:  # the earlier result lacks a frame of this chunk: compute all
                    extra = await self._analyse(run, ticket, sorted(reuse.stages))
                    chunk = merge_outputs([*outputs, *extra])
            finally:
                self._executor.release(ticket)
            for stage in image_stages:
                await run.stage_done(stage)
            if self._executor.embeds:
                if EMBED not in ticket.applied:
                    chunk = await run.timed(EMBED, self._executor.embed(chunk), ticket.frames)
                await run.stage_done(EMBED)
            if self._settings.chunk_checkpoints:
                await asyncio.to_thread(self._chunks.put, self._version, chunk)
                await self._store.mark_chunk(
                    run.ref.video_id, run.epoch, chunk.index, restored=False, total=run.total
                )
            return chunk
        finally:
            self._metrics.chunk_finished(ticket.frames)
            slot.release()
            self._chunk_slots.release()

    async def _analyse(
        self, run: _VideoRun, ticket: ChunkTicket, stages: Collection[str]
    ) -> list[Chunk]:
        return await asyncio.gather(
            *(
                run.timed(stage, self._executor.analyse(stage, ticket), ticket.frames)
                for stage in stages
            )
        )

    async def _fail(
        self, ref: VideoRef, epoch: int | None, error: ReelsenseError, *, stage: str | None
    ) -> None:
        log.warning("video %s failed: %s: %s", ref.video_id, error.code, error)
        await self._store.mark_failed(
            ref,
            epoch,
            code=error.code,
            message=str(error),
            pipeline_version=self._version,
            stage=stage,
            outbox=self._outbox(
                "video.failed",
                ref,
                {"error": {"code": error.code, "message": str(error)}, "stage": stage},
            ),
        )
        if epoch is not None:
            await self._drop_chunks(ref.video_id)

    async def reject(self, ref: VideoRef, error: ReelsenseError) -> None:
        """Record a video that cannot even be started (an invalid event) as failed."""
        await self._fail(ref, None, error, stage="validate")

    def _outbox(self, kind: str, ref: VideoRef, data: dict[str, Any]) -> OutboxEvent:
        return OutboxEvent(
            type=kind,
            video_id=ref.video_id,
            tenant=ref.tenant,
            pipeline_version=self._version,
            callback_url=ref.callback_url,
            data={"video_id": ref.video_id, "tenant": ref.tenant, "uri": ref.uri, **data},
            timestamp=datetime.now(UTC),
        )


class _VideoRun:
    """Progress bookkeeping of one attempt at one video."""

    def __init__(
        self, ref: VideoRef, epoch: int, store: CheckpointStore, metrics: PipelineMetrics
    ) -> None:
        self.ref = ref
        self.metrics = metrics
        self.epoch = epoch
        self.store = store
        self.seen: set[int] = set()
        self.total: int | None = None
        self.done: dict[str, int] = defaultdict(int)
        self.timings: dict[str, float] = defaultdict(float)

    @property
    def decoded_count(self) -> int:
        return len(self.seen)

    def decoded(self, index: int, last: bool) -> None:
        self.seen.add(index)
        if last:
            self.total = index + 1

    def restored(self, chunk: Chunk) -> None:
        self.decoded(chunk.index, chunk.last)

    async def progress(self, stage: str, done: int, total: int | None) -> None:
        await self.store.advance(self.ref.video_id, self.epoch, stage, done, total)

    async def stage_done(self, stage: str) -> None:
        self.done[stage] += 1
        await self.progress(stage, self.done[stage], self.total)

    async def timed(self, stage: str, work: Awaitable[Chunk], frames: int = 0) -> Chunk:
        started = time.monotonic()
        self.metrics.stage_sent(stage)
        ok = False
        try:
            result = await work
            ok = True
            return result
        except PermanentError as exc:
            exc.stage = stage  # type: ignore[attr-defined]
            raise
        finally:
            self._returned(stage, frames, time.monotonic() - started, ok=ok)

    def record(self, stage: str, seconds: float, frames: int) -> None:
        """A stage the decoder ran on a chunk before handing it over, and what it took."""
        self.metrics.stage_sent(stage)
        self._returned(stage, frames, seconds, ok=True)

    def _returned(self, stage: str, frames: int, seconds: float, *, ok: bool) -> None:
        self.timings[stage] += seconds
        self.metrics.stage_returned(stage, frames, seconds, ok=ok)


@dataclass(frozen=True)
class _Reuse:
    """Image stage outputs taken from a video's earlier result instead of computed again."""

    stages: frozenset[str]  # the image stages whose outputs are taken
    fields: tuple[str, ...]  # the ``Frame`` fields those stages fill
    frames: dict[int, Frame]  # the earlier result's frames by index
    probe: ProbeInfo | None
    chunk_size: Callable[[ProbeInfo], int]  # as the decoder cuts a video's chunks

    @classmethod
    def plan(
        cls, lineage: Lineage, ref: VideoRef, earlier: EarlierResult | None, stages: Collection[str]
    ) -> _Reuse:
        reused: frozenset[str] = frozenset()
        if earlier is not None and earlier.uri == ref.uri and earlier.probe is not None:
            reused = lineage.reusable(earlier.stage_versions) & frozenset(stages)
        return cls(
            stages=reused,
            fields=tuple(f for stage in sorted(reused) for f in lineage.fills[stage]),
            frames={f.index: f for f in earlier.frames} if reused and earlier else {},
            probe=earlier.probe if earlier else None,
            chunk_size=lineage.chunk_size,
        )

    def needs_pixels(self, stages: Collection[str]) -> bool:
        return not stages or bool(set(stages) - self.stages)

    def fill(self, chunk: Chunk) -> Chunk | None:
        """The chunk with the taken fields copied in; None if a frame is not in the earlier
        result (the same sampling makes the same frames, so this is only a safeguard)."""
        if not self.stages:
            return chunk
        frames: list[Frame] = []
        for frame in chunk.frames:
            found = self.frames.get(frame.index)
            if found is None or round(found.timestamp_s, 3) != round(frame.timestamp_s, 3):
                return None
            frames.append(replace(frame, **{f: getattr(found, f) for f in self.fields}))
        return replace(chunk, frames=frames)

    async def replay(self, ref: VideoRef) -> AsyncIterator[IngestItem]:
        """The earlier result's frames as the decoder would chunk them, with no pixels: what
        the ingest stream yields when no stage needs pixels."""
        assert self.probe is not None
        yield LocalVideo(ref=ref, path="", probe=self.probe)
        ordered = [replace(f, embedding=None) for _, f in sorted(self.frames.items())]
        size = self.chunk_size(self.probe)
        starts = range(0, len(ordered), size) if ordered else range(1)
        for index, start in enumerate(starts):
            frames = ordered[start : start + size]
            last = start + size >= len(ordered)
            chunk = Chunk(ref.video_id, index, frames, last=last)
            yield ChunkTicket(ref.video_id, index, len(frames), last, chunk)


def _resume_point(restored: dict[int, Chunk]) -> ResumePoint | None:
    """After the last of the chunks persisted without a gap from the start."""
    previous: Chunk | None = None
    while (previous.index + 1 if previous else 0) in restored:
        previous = restored[previous.index + 1 if previous else 0]
    if previous is None or not previous.frames:
        return None
    last = previous.frames[-1]
    return ResumePoint(previous.index + 1, last.index + 1, last.timestamp_s, finished=previous.last)


def _done_data(result: VideoResult) -> dict[str, Any]:
    return {
        "frames": len(result.frames),
        "duration_s": result.probe.duration_s,
        "text": result.text,
        "timings": result.timings,
    }
