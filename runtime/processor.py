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
import functools
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from checkpoint.base import CheckpointStore, Claim, OutboxEvent, VideoState
from checkpoint.chunk_store import ChunkStore
from checkpoint.errors import StaleEpoch, VideoIdTaken
from core.config import RuntimeSettings
from core.errors import (
    DependencyUnavailable,
    PermanentError,
    ReelsenseError,
    RetriesExhausted,
    RetryableError,
)
from core.records import Chunk, EarlierResult, LocalVideo, VideoRef, VideoResult, as_lane
from core.retry import RetryFailure, RetryPolicy
from core.speech import Speech, SpeechEnd, SpeechPart
from core.stage_names import DECODE, EMBED, FETCH
from core.urls import redact_url
from runtime.chunk_stages import ChunkStages, DecodeSlots, decoding, resume_point
from runtime.executor import IngestChunk, IngestItem, StageExecutor
from runtime.lease import Superseded, claim_when_free, holding, owner_id
from runtime.messages import done_message_data
from runtime.metrics import PipelineMetrics
from runtime.partials import PartialResults
from runtime.reuse import ReusePlan
from runtime.speech_track import SpeechTrack
from runtime.video_run import VideoRun
from stages.pipeline import Lineage
from stages.sampling import NOTHING_TO_DECODE

log = logging.getLogger(__name__)


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
        quiet_lanes: frozenset[str] = frozenset(),
    ) -> None:
        """``quiet_lanes``: the lanes whose videos notify nobody; a final transition appends
        no outbox entry (webhooks, status message) for them (bulk work, unless
        ``backfill.notify``)."""
        self._metrics = metrics or PipelineMetrics()
        self._quiet_lanes = quiet_lanes
        self._store = store
        self._executor = executor
        self._chunks = chunks
        self._lineage = lineage
        self._version = lineage.version
        self._settings = settings
        self._chunk_stages = ChunkStages(
            executor, store, chunks if settings.chunk_checkpoints else None, lineage
        )
        self._chunk_slots = asyncio.Semaphore(settings.chunks_in_flight)
        self._partials = PartialResults(
            executor,
            self._version,
            every_s=settings.partial_results_every_s if settings.partial_results else None,
        )
        self._owner = owner_id(settings)
        self._decode_slots = (
            DecodeSlots(settings.videos_decoding) if settings.videos_decoding else None
        )

    @property
    def pipeline_version(self) -> str:
        return self._version

    async def process(self, ref: VideoRef) -> str:
        """Returns once the video's outcome is durable: "done", "failed", "skipped" (done
        before) or "stale" (settled by a newer attempt). Raises ``RetryableError`` when even
        recording a failure failed (the checkpoint store is down): the offset must then not
        move; ``VideoIdTaken`` when the id is another tenant's video, whose record is left as
        it is."""
        self._metrics.video_started()
        started, outcome = time.monotonic(), "error"
        try:
            outcome = await self._process(ref)
        finally:
            self._metrics.video_finished(outcome, time.monotonic() - started)
        return outcome

    async def _process(self, ref: VideoRef) -> str:
        await self._store.mark_queued(ref, self._version)
        lost: int | None = None
        while True:
            try:
                return await self._attempts(ref, lost)
            except Superseded as superseded:
                # A newer attempt took the video over (this one's lease had lapsed): wait
                # until it settles the video, or stops renewing its lease and leaves it here.
                log.warning("video %s is owned by a newer attempt; waiting", ref.video_id)
                lost = superseded.epoch

    async def _attempts(self, ref: VideoRef, lost: int | None) -> str:
        failed = functools.partial(self._attempt_failed, ref)
        try:
            async for attempt in self._attempt_policy.attempts(on_failure=failed):
                # Claiming and recording a failure stay outside the attempt: when the store
                # fails them, the record fails as a whole and the consumer retries it.
                claim = await self._claim(ref, lost)
                if claim.skip:
                    return await self._skipped(ref, claim)
                refused: PermanentError | None = None
                with attempt:
                    try:
                        async with holding(
                            self._store, ref.video_id, claim.epoch, self._settings.lease_s
                        ):
                            await self._run(ref, claim.epoch, fresh=claim.status.attempts == 1)
                    except PermanentError as exc:
                        refused = exc
                if isinstance(refused, StaleEpoch):
                    raise Superseded(claim.epoch)
                if refused is not None:
                    await self._fail(ref, claim.epoch, refused, stage=refused.stage)
                    return "failed"
        except RetriesExhausted as exhausted:
            last = exhausted.error
            error = (
                last
                if isinstance(last, ReelsenseError)
                else ReelsenseError(f"{type(last).__name__}: {last}", code="internal_error")
            )
        else:
            return "done"
        claim = await self._claim(ref, lost)
        if claim.skip:
            return await self._skipped(ref, claim)
        await self._fail(ref, claim.epoch, error, stage=None)
        return "failed"

    async def _claim(self, ref: VideoRef, lost: int | None) -> Claim:
        lease_s = self._settings.lease_s
        return await claim_when_free(
            self._store, ref, self._version, owner=self._owner, lease_s=lease_s, lost=lost
        )

    async def _skipped(self, ref: VideoRef, claim: Claim) -> str:
        # The attempt that settled the video may have died while it removed the persisted
        # chunks (they go after the final transition): the event comes back, and they go now.
        await self._drop_chunks(ref.video_id)
        if claim.status.status is VideoState.DONE:
            log.info("video %s already done for %s, skipping", ref.video_id, self._version)
            return "skipped"
        log.info("video %s was settled by a newer attempt", ref.video_id)
        return "stale"

    @property
    def _attempt_policy(self) -> RetryPolicy:
        """Attempts at a video: ``max_attempts``, waiting ``retry_backoff_s`` between them (its
        last wait repeats). Anything but a ``PermanentError`` is retried: a lost worker or a
        bug may not come back, and the video then fails with the last error. An outage of a
        dependency uses up no attempt until it has lasted ``outage_window_s``."""
        s = self._settings
        return RetryPolicy(
            schedule=s.retry_backoff_s,
            max_attempts=s.max_attempts,
            retry_on=(Exception,),
            patient=(DependencyUnavailable,),
            patience_s=s.outage_window_s,
        )

    @staticmethod
    def _attempt_failed(ref: VideoRef, failure: RetryFailure) -> None:
        error, attempt = failure.error, failure.attempt
        then = "no attempt left" if failure.delay is None else f"retry in {failure.delay:.1f}s"
        if isinstance(error, RetryableError):
            code = error.code
            log.warning(
                "video %s attempt %d failed (%s: %s); %s", ref.video_id, attempt, code, error, then
            )
        else:  # a bug or a lost worker
            log.error(
                "video %s attempt %d crashed; %s", ref.video_id, attempt, then, exc_info=error
            )

    async def _run(self, ref: VideoRef, epoch: int, *, fresh: bool) -> None:
        earlier = await self._executor.earlier(ref.video_id)
        if earlier is not None and earlier.tenant not in ("", ref.tenant):
            # Redis lost the record, but the sinks know the id as another tenant's video.
            raise VideoIdTaken(f"video id {ref.video_id!r} belongs to another tenant")
        if (
            fresh
            and earlier is not None
            and earlier.uri in ("", ref.uri)  # the same source, or one not known
            and earlier.pipeline_version == self._version
        ):
            await self._rebuild_record(ref, epoch, earlier)
            return
        reuse = self._plan_reuse(ref, earlier)
        started = time.monotonic()
        run = VideoRun(ref, epoch, self._store, self._metrics)
        restored = await self._chunk_stages.restore(run)
        persisted = self._chunks if self._settings.chunk_checkpoints else None
        speech = await SpeechTrack.start(run, self._lineage, earlier, persisted)
        items = self._ingest(ref, reuse, restored, speech)
        try:
            video, computed = await self._take(
                run, items, restored, reuse, started=started, speech=speech
            )
        finally:
            await self._partials.settle(run)  # the final write carries what parts still wait
        run.timings["total"] = time.monotonic() - started
        chunks = sorted([*restored.values(), *computed], key=lambda c: c.index)
        await self._finish(run, video, chunks, speech.speech() if speech else None)

    async def _rebuild_record(self, ref: VideoRef, epoch: int, earlier: EarlierResult) -> None:
        """The checkpoint record is new but the sinks hold this version's results: Redis lost
        its state after the video was done. Rebuild the record, do not recompute."""
        log.warning("video %s: results found in the sinks, marking done", ref.video_id)
        count = earlier.frame_count
        await self._store.mark_done(
            ref.video_id,
            epoch,
            frames=count,
            timings={},
            outbox=self._outbox("video.done", ref, {"frames": count}),
        )

    def _plan_reuse(self, ref: VideoRef, earlier: EarlierResult | None) -> ReusePlan:
        reuse = ReusePlan.plan(self._lineage, ref, earlier, self._executor.image_stages)
        if reuse.stages:
            log.info(
                "video %s: taking %s from its result under %s",
                ref.video_id,
                ", ".join(sorted(reuse.stages)),
                earlier.pipeline_version if earlier else "-",
            )
        return reuse

    def _ingest(
        self,
        ref: VideoRef,
        reuse: ReusePlan,
        restored: dict[int, Chunk],
        speech: SpeechTrack | None,
    ) -> AsyncIterator[IngestItem]:
        """The video, then its chunks: decoded from the first unfinished one on, or replayed
        from the earlier result when no stage needs pixels; and the speech left to recognise
        (the file is fetched for it alone when nothing is decoded)."""
        executor, recognise = self._executor, speech.recognise_from if speech else None
        if not reuse.needs_pixels(executor.image_stages):
            if recognise is None:
                return reuse.replay(ref)
            return reuse.replay(ref, after=executor.ingest(ref, NOTHING_TO_DECODE, (), recognise))
        items = executor.ingest(ref, resume_point(restored), self._inline(reuse), recognise)
        if self._decode_slots is not None:
            items = decoding(items, self._decode_slots, ref.lane)
        return items

    async def _take(
        self,
        run: VideoRun,
        items: AsyncIterator[IngestItem],
        restored: dict[int, Chunk],
        reuse: ReusePlan,
        *,
        started: float,
        speech: SpeechTrack | None,
    ) -> tuple[LocalVideo, list[Chunk]]:
        """Take the ingest stream, a task per chunk left to compute; the video and the chunks
        computed, once every task is done."""
        video: LocalVideo | None = None
        tasks: list[asyncio.Task[Chunk]] = []
        per_video = asyncio.Semaphore(self._settings.chunks_in_flight_per_video)
        try:
            async for item in items:
                if isinstance(item, LocalVideo):
                    video = run.probe_of(item)
                    run.timings[FETCH] = time.monotonic() - started
                    await run.progress(FETCH, 1, 1)
                    continue
                if isinstance(item, SpeechPart | SpeechEnd):
                    assert speech is not None  # asked for
                    await speech.take(item)
                    if isinstance(item, SpeechPart):
                        await self._partials.speech(run, item)
                    continue
                run.decoded(item.index, item.last)
                await run.progress(DECODE, run.decoded_count, run.total)
                if item.index not in restored:  # else its pixels are not needed
                    tasks.append(await self._start(run, item, per_video, reuse))
            computed = await asyncio.gather(*tasks)
        except BaseException as exc:
            if isinstance(exc, PermanentError):
                # From the ingest stream: fetch/probe until the video is open, then decode.
                exc.with_stage(DECODE if video is not None else FETCH)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if video is None:
            raise RetryableError(
                "the decoder ended without probing the video", code="internal_error"
            )
        return video, computed

    async def _start(
        self, run: VideoRun, ticket: IngestChunk, per_video: asyncio.Semaphore, reuse: ReusePlan
    ) -> asyncio.Task[Chunk]:
        """A task for the chunk, once this video and the process have room for it."""
        await per_video.acquire()
        await self._chunk_slots.acquire()
        self._metrics.chunk_started(ticket.frames)
        return asyncio.create_task(self._chunk(run, ticket, per_video, reuse))

    async def _finish(
        self, run: VideoRun, video: LocalVideo, chunks: list[Chunk], speech: Speech | None
    ) -> None:
        """The video's result to the sinks, then the video done (with its outbox entry)."""
        ref = run.ref
        frames = [frame for chunk in chunks for frame in chunk.frames]
        result = VideoResult(
            ref=ref,
            pipeline_version=self._version,
            probe=video.probe,
            frames=frames,
            completed_at=datetime.now(UTC),
            timings=dict(run.timings),
            epoch=run.epoch,
            stage_versions=self._lineage.versions,
            speech=speech,
        )
        await self._executor.write(result)
        await self._store.mark_done(
            ref.video_id,
            run.epoch,
            frames=len(frames),
            timings=result.timings,
            outbox=self._outbox("video.done", ref, done_message_data(result)),
        )
        await self._drop_chunks(ref.video_id)

    def _inline(self, reuse: ReusePlan) -> tuple[str, ...]:
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

    async def _drop_chunks(self, video_id: str) -> None:
        """Remove the video's persisted chunks once its outcome is final."""
        if not self._settings.chunk_checkpoints:
            return
        try:
            await asyncio.to_thread(self._chunks.delete_video, video_id, self._version)
        except ReelsenseError as exc:  # only space is lost
            log.warning("video %s: persisted chunks not removed: %s", video_id, exc)

    async def _chunk(
        self, run: VideoRun, ticket: IngestChunk, slot: asyncio.Semaphore, reuse: ReusePlan
    ) -> Chunk:
        try:
            chunk = await self._chunk_stages.run(run, ticket, reuse)
            await self._partials.chunk(run, chunk)
            return chunk
        finally:
            self._metrics.chunk_finished(ticket.frames)
            slot.release()
            self._chunk_slots.release()

    async def _fail(
        self,
        ref: VideoRef,
        epoch: int | None,
        error: ReelsenseError,
        *,
        stage: str | None,
        log_level: int = logging.WARNING,
    ) -> None:
        recorded = await self._store.mark_failed(
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
                epoch=epoch,
            ),
        )
        if not recorded:
            log.log(log_level, "video %s is known: kept its record (%s)", ref.video_id, error.code)
            return
        log.log(log_level, "video %s failed: %s: %s", ref.video_id, error.code, error)
        if epoch is not None:
            await self._drop_chunks(ref.video_id)
            await self._partials.drop(ref.video_id)

    async def reject(self, ref: VideoRef, error: ReelsenseError) -> None:
        """Record a video that cannot even be started (an invalid event) as failed, unless
        a valid event made it known: its record then stays as it is (the consumer
        dead-letters the event either way)."""
        # INFO: the consumer logs each invalid event once, at WARNING.
        await self._fail(ref, None, error, stage="validate", log_level=logging.INFO)

    def _outbox(
        self, kind: str, ref: VideoRef, data: dict[str, Any], *, epoch: int | None = None
    ) -> OutboxEvent | None:
        # A failure carries the epoch of the attempt that failed: each is its own webhook
        # message (see webhook_id). "done" comes once per pipeline version, whichever attempt
        # finished it, so it carries none: the done a rebuild after a Redis loss appends
        # repeats the first one's id and receivers deduplicate it.
        # Receivers get the source URL without the secrets it may carry.
        if as_lane(ref.lane) in self._quiet_lanes:
            return None
        return OutboxEvent(
            type=kind,
            video_id=ref.video_id,
            tenant=ref.tenant,
            pipeline_version=self._version,
            callback_url=ref.callback_url,
            data={
                "video_id": ref.video_id,
                "tenant": ref.tenant,
                "uri": redact_url(ref.uri),
                "lane": ref.lane,
                **data,
            },
            timestamp=datetime.now(UTC),
            epoch=epoch,
        )
