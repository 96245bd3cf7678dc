"""Per-video orchestration: one asyncio task per video, many videos at once.

For each video: claim it (owner epoch), fetch + probe, stream chunks out of the decoder, run
the image stages side by side on each chunk and then the embedder, record progress per stage,
write the results to the sinks, and only then mark the video done (with its outbox entry).
Durable steps go in one order: sinks, checkpoint, then (by the consumer) the Kafka offset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from checkpoint.base import CheckpointStore, OutboxEvent
from checkpoint.errors import StaleEpoch
from core.config import RuntimeSettings
from core.errors import PermanentError, ReelsenseError, RetryableError
from core.records import Chunk, Frame, LocalVideo, VideoRef
from service.executor import ChunkTicket, StageExecutor
from sinks.base import VideoResult

log = logging.getLogger(__name__)

ResultWriter = Callable[[VideoResult], Awaitable[None]]

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
        write: ResultWriter,
        pipeline_version: str,
        settings: RuntimeSettings,
    ) -> None:
        self._store = store
        self._executor = executor
        self._write = write
        self._version = pipeline_version
        self._settings = settings
        self._chunk_slots = asyncio.Semaphore(settings.chunks_in_flight)

    @property
    def pipeline_version(self) -> str:
        return self._version

    async def process(self, ref: VideoRef) -> None:
        """Returns once the video's outcome is durable: done, failed, skipped or owned by a
        newer attempt. Raises only ``RetryableError`` when even recording a failure failed
        (the checkpoint store is down): the offset must then not move."""
        await self._store.mark_queued(ref, self._version)
        last_error: ReelsenseError | None = None
        for attempt in range(self._settings.max_attempts):
            claim = await self._store.claim(ref, self._version)
            if claim.skip:
                log.info("video %s already done for %s, skipping", ref.video_id, self._version)
                return
            try:
                await self._run(ref, claim.epoch)
                return
            except StaleEpoch:
                log.warning("video %s is owned by a newer attempt; leaving it", ref.video_id)
                return
            except PermanentError as exc:
                await self._fail(ref, claim.epoch, exc, stage=getattr(exc, "stage", None))
                return
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
        if not claim.skip:
            await self._fail(ref, claim.epoch, last_error, stage=None)

    def _backoff(self, attempt: int) -> float:
        schedule = self._settings.retry_backoff_s
        return schedule[min(attempt, len(schedule) - 1)] if schedule else 0.0

    async def _run(self, ref: VideoRef, epoch: int) -> None:
        started = time.monotonic()
        run = _VideoRun(ref, epoch, self._store, self._executor)
        video: LocalVideo | None = None
        tasks: list[asyncio.Task[Chunk]] = []
        per_video = asyncio.Semaphore(self._settings.chunks_in_flight_per_video)
        try:
            async for item in self._executor.ingest(ref):
                if isinstance(item, LocalVideo):
                    video = item
                    run.timings[FETCH] = time.monotonic() - started
                    await run.progress(FETCH, 1, 1)
                    continue
                await per_video.acquire()
                await self._chunk_slots.acquire()
                run.chunks_seen += 1
                if item.last:
                    run.total = run.chunks_seen
                await run.progress(DECODE, run.chunks_seen, run.total)
                tasks.append(asyncio.create_task(self._chunk(run, item, per_video)))
            chunks = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if video is None:
            raise RetryableError(
                "the decoder ended without probing the video", code="internal_error"
            )
        run.timings["total"] = time.monotonic() - started
        frames = [
            frame for chunk in sorted(chunks, key=lambda c: c.index) for frame in chunk.frames
        ]
        result = VideoResult(
            ref=ref,
            pipeline_version=self._version,
            probe=video.probe,
            frames=frames,
            completed_at=datetime.now(UTC),
            timings=dict(run.timings),
        )
        await self._write(result)
        await self._store.mark_done(
            ref.video_id,
            epoch,
            frames=len(frames),
            timings=result.timings,
            outbox=self._outbox("video.done", ref, _done_data(result)),
        )

    async def _chunk(self, run: _VideoRun, ticket: ChunkTicket, slot: asyncio.Semaphore) -> Chunk:
        try:
            stages = self._executor.image_stages
            outputs = await asyncio.gather(
                *(run.timed(stage, self._executor.analyse(stage, ticket)) for stage in stages)
            )
            for stage in stages:
                await run.stage_done(stage)
            chunk = _merge(outputs)
            if self._executor.embeds:
                chunk = await run.timed(EMBED, self._executor.embed(chunk))
                await run.stage_done(EMBED)
            return chunk
        finally:
            slot.release()
            self._chunk_slots.release()

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
        self, ref: VideoRef, epoch: int, store: CheckpointStore, executor: StageExecutor
    ) -> None:
        self.ref = ref
        self.epoch = epoch
        self.store = store
        self.chunks_seen = 0
        self.total: int | None = None
        self.done: dict[str, int] = defaultdict(int)
        self.timings: dict[str, float] = defaultdict(float)

    async def progress(self, stage: str, done: int, total: int | None) -> None:
        await self.store.advance(self.ref.video_id, self.epoch, stage, done, total)

    async def stage_done(self, stage: str) -> None:
        self.done[stage] += 1
        await self.progress(stage, self.done[stage], self.total)

    async def timed(self, stage: str, work: Awaitable[Chunk]) -> Chunk:
        started = time.monotonic()
        try:
            return await work
        except PermanentError as exc:
            exc.stage = stage  # type: ignore[attr-defined]
            raise
        finally:
            self.timings[stage] += time.monotonic() - started


def _merge(outputs: list[Chunk]) -> Chunk:
    """Combine what the image stages found in the same chunk, frame by frame."""
    base = outputs[0]
    frames: list[Frame] = []
    for position, frame in enumerate(base.frames):
        merged = replace(frame, image=None)
        for other in outputs[1:]:
            found = other.frames[position]
            merged.ocr_lines = merged.ocr_lines or found.ocr_lines
            merged.caption = merged.caption or found.caption
        frames.append(merged)
    return replace(base, frames=frames)


def _done_data(result: VideoResult) -> dict[str, Any]:
    return {
        "frames": len(result.frames),
        "duration_s": result.probe.duration_s,
        "text": result.text,
        "timings": result.timings,
    }
