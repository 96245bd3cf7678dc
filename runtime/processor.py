"""Per-video orchestration: one asyncio task per video, many videos at once.

For each video: claim it (owner epoch), fetch + probe, stream chunks out of the decoder, run
the image stages side by side on each chunk and then the embedder, persist each chunk's outputs
and record it done, write the results to the sinks, and only then mark the video done (with its
outbox entry; ``runtime.final_transitions``). Durable steps go in one order: chunk outputs
before the chunk checkpoint, sinks before the video checkpoint, and (by the consumer) the Kafka
offset last.

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

from checkpoint.base import CheckpointStore, Claim, VideoState
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
from core.records import Chunk, EarlierResult, LocalVideo, VideoRef
from core.retry import RetryFailure, RetryPolicy
from core.speech import SpeechEnd, SpeechPart
from core.stage_names import DECODE, EMBED, FETCH
from core.tasks import cancel_and_wait
from runtime.chunk_stages import ChunkStages, DecodeSlots, decoding, resume_point
from runtime.executor import IngestChunk, IngestItem, StageExecutor, closing
from runtime.final_transitions import FinalTransitions
from runtime.lease import Heartbeat, Superseded, claim_when_free, holding, owner_id
from runtime.metrics import PipelineMetrics
from runtime.partials import PartialResults
from runtime.results import ResultStore
from runtime.reuse import ReusePlan
from runtime.speech_track import SpeechTrack
from runtime.video_run import VideoRun
from runtime.video_stages import VideoStages
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
        results: ResultStore,
        chunks: ChunkStore,
        lineage: Lineage,
        settings: RuntimeSettings,
        metrics: PipelineMetrics | None = None,
        quiet_lanes: frozenset[str] = frozenset(),
        video_stages: VideoStages | None = None,
    ) -> None:
        """``executor`` runs the stages; ``results`` is where the video's earlier result is
        read and its partial and final results written. ``quiet_lanes``: the lanes whose
        videos notify nobody; a final transition appends no outbox entry (webhooks, status
        message) for them (bulk work, unless ``backfill.notify``). ``video_stages``: what
        runs on each video's assembled result (none by default)."""
        self._metrics = metrics or PipelineMetrics()
        self._store = store
        self._executor = executor
        self._results = results
        self._chunks = chunks
        self._lineage = lineage
        self._version = lineage.version
        self._settings = settings
        persisted = chunks if settings.chunk_checkpoints else None
        self._chunk_stages = ChunkStages(executor, store, persisted, lineage)
        self._chunk_slots = asyncio.Semaphore(settings.chunks_in_flight)
        self._partials = PartialResults(
            results,
            self._version,
            every_s=settings.partial_results_every_s if settings.partial_results else None,
        )
        self._owner = owner_id(settings)
        self._decode_slots = (
            DecodeSlots(settings.videos_decoding) if settings.videos_decoding else None
        )
        self._transitions = FinalTransitions(
            store,
            results,
            persisted,
            lineage,
            self._partials,
            quiet_lanes=quiet_lanes,
            video_stages=video_stages,
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
            with self._executor.taking_on():
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
                heartbeat = Heartbeat()
                with attempt:
                    try:
                        async with holding(
                            self._store,
                            ref.video_id,
                            claim.epoch,
                            self._settings.lease_s,
                            heartbeat=heartbeat,
                            stall_s=self._settings.stall_s,
                        ):
                            fresh = claim.status.attempts == 1
                            await self._run(ref, claim.epoch, heartbeat, fresh=fresh)
                    except PermanentError as exc:
                        refused = exc
                if isinstance(refused, StaleEpoch):
                    raise Superseded(claim.epoch)
                if isinstance(refused, VideoIdTaken):  # the record is its owner's again
                    raise refused
                if refused is not None:
                    await self._transitions.fail(ref, claim.epoch, refused, stage=refused.stage)
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
        await self._transitions.fail(ref, claim.epoch, error, stage=None)
        return "failed"

    async def _claim(self, ref: VideoRef, lost: int | None) -> Claim:
        s = self._settings
        return await claim_when_free(
            self._store,
            ref,
            self._version,
            owner=self._owner,
            lease_s=s.lease_s,
            lost=lost,
            wait_s=s.claim_wait_s,
        )

    async def _skipped(self, ref: VideoRef, claim: Claim) -> str:
        # The attempt that settled the video may have died while it removed the persisted
        # chunks (they go after the final transition): the event comes back, and they go now.
        await self._transitions.drop_chunks(ref.video_id)
        if claim.status.status is VideoState.DONE:
            log.info("video %s already done for %s, skipping", ref.video_id, self._version)
            return "skipped"
        if claim.status.status is VideoState.DELETED:
            log.info("video %s was deleted, skipping", ref.video_id)
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

    async def _run(self, ref: VideoRef, epoch: int, heartbeat: Heartbeat, *, fresh: bool) -> None:
        earlier = await self._results.earlier(ref.video_id)
        if earlier is not None and earlier.tenant not in ("", ref.tenant):
            # Redis lost the record, but the sinks know the id as another tenant's video.
            await self._transitions.give_back(ref, epoch, earlier)
            raise VideoIdTaken(f"video id {ref.video_id!r} belongs to another tenant")
        if (
            fresh
            and earlier is not None
            and earlier.uri in ("", ref.uri)  # the same source, or one not known
            and earlier.pipeline_version == self._version
        ):
            await self._transitions.rebuild_record(ref, epoch, earlier)
            return
        reuse = self._plan_reuse(ref, earlier)
        started = time.monotonic()
        run = VideoRun(ref, epoch, self._store, self._metrics, heartbeat)
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
        heard = speech.speech() if speech else None
        await self._transitions.finish(run, video, chunks, heard, reuse.outputs)

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
            items = decoding(items, self._decode_slots, ref.lane, listens=recognise is not None)
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
            async with closing(items):
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
            await cancel_and_wait(*tasks)
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

    async def reject(self, ref: VideoRef, error: ReelsenseError) -> None:
        """Record a video that cannot even be started (an invalid event) as failed, unless
        a valid event made it known: its record then stays as it is (the consumer
        dead-letters the event either way)."""
        # INFO: the consumer logs each invalid event once, at WARNING.
        await self._transitions.fail(ref, None, error, stage="validate", log_level=logging.INFO)
