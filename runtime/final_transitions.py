"""A video's final transitions: done (its result in the sinks first) or failed with a reason,
each with its outbox entry, and then the chunks its attempts persisted removed."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from checkpoint.base import CheckpointStore, OutboxEvent, ReviewOutcome
from checkpoint.chunk_store import ChunkStore
from core.errors import ReelsenseError
from core.outputs import VideoOutput
from core.records import Chunk, EarlierResult, LocalVideo, VideoRef, VideoResult, as_lane
from core.speech import Speech
from core.urls import redact_url
from runtime.messages import done_message_data, review_message_data, review_summary
from runtime.partials import PartialResults
from runtime.results import ResultStore
from runtime.video_run import VideoRun
from runtime.video_stages import VideoStages
from stages.pipeline import Lineage

# Under the processor's name, with the rest of what a video's attempts log.
log = logging.getLogger("runtime.processor")


class FinalTransitions:
    """Marks videos done or failed in the checkpoint store, with the outbox entries that
    announce them (none for the ``quiet_lanes``)."""

    def __init__(
        self,
        store: CheckpointStore,
        results: ResultStore,
        chunks: ChunkStore | None,
        lineage: Lineage,
        partials: PartialResults,
        *,
        quiet_lanes: frozenset[str],
        video_stages: VideoStages | None = None,
    ) -> None:
        """``chunks``: where attempts persist their chunks, None when they persist none."""
        self._store = store
        self._results = results
        self._chunks = chunks
        self._lineage = lineage
        self._partials = partials
        self._quiet_lanes = quiet_lanes
        self._video_stages = video_stages or VideoStages(())
        self._version = lineage.version

    async def rebuild_record(self, ref: VideoRef, epoch: int, earlier: EarlierResult) -> None:
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

    async def give_back(self, ref: VideoRef, epoch: int, earlier: EarlierResult) -> None:
        """The sinks hold the id as another tenant's video, whose record Redis lost: the
        record goes back to that tenant as the sinks hold it (``CheckpointStore.give_back``),
        so the refused event leaves nothing of its own."""
        log.warning(
            "video %s: the sinks hold it for another tenant; refusing tenant %s's event",
            ref.video_id,
            ref.tenant,
        )
        owner = VideoRef(ref.video_id, earlier.uri, tenant=earlier.tenant)
        await self._store.give_back(
            owner, epoch, pipeline_version=earlier.pipeline_version, frames=earlier.frame_count
        )

    async def finish(
        self,
        run: VideoRun,
        video: LocalVideo,
        chunks: list[Chunk],
        speech: Speech | None,
        taken: Mapping[str, VideoOutput],
    ) -> None:
        """The video's result, given the video stages' outputs (``taken`` from its earlier
        result, where they are what the stages would give now), to the sinks, then the
        video done (with its outbox entry)."""
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
        result = await self._video_stages.run(result, taken, functools.partial(self._advance, run))
        run.heartbeat.beat()  # the write has a deadline of its own (ray.write_timeout_s)
        await self._results.write(result)
        review = review_message_data(result)
        flagged = self._outbox("video.review", ref, review) if review is not None else None
        # Its decision goes with the record, for the review queue (checkpoint.base.ReviewQueue).
        summary = review_summary(result)
        outcome = (
            None if summary is None else ReviewOutcome(summary["decision"], summary["categories"])
        )
        await self._store.mark_done(
            ref.video_id,
            run.epoch,
            frames=len(frames),
            timings=result.timings,
            outbox=self._outbox("video.done", ref, done_message_data(result)),
            also=() if flagged is None else (flagged,),
            review=outcome,
        )
        await self.drop_chunks(ref.video_id)

    async def _advance(self, run: VideoRun, stage: str, done: int) -> None:
        """A video stage's progress: one step, done or not (each counts as the attempt's
        progress, ``runtime.stall_s``)."""
        run.heartbeat.beat()
        await self._store.advance(run.ref.video_id, run.epoch, stage, done, 1)

    async def drop_chunks(self, video_id: str) -> None:
        """Remove the video's persisted chunks once its outcome is final."""
        if self._chunks is None:
            return
        try:
            await asyncio.to_thread(self._chunks.delete_video, video_id, self._version)
        except ReelsenseError as exc:  # only space is lost
            log.warning("video %s: persisted chunks not removed: %s", video_id, exc)

    async def fail(
        self,
        ref: VideoRef,
        epoch: int | None,
        error: ReelsenseError,
        *,
        stage: str | None,
        log_level: int = logging.WARNING,
    ) -> None:
        """Record the video failed with ``error`` (``epoch`` None: it was never claimed); a
        video already known keeps its record."""
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
            await self.drop_chunks(ref.video_id)
            await self._partials.drop(ref.video_id)

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
