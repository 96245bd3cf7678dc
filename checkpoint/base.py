"""The CheckpointStore interface and the records it keeps.

Durable steps go in one order: sink write, then checkpoint, then Kafka offset. A checkpoint
therefore never claims more than the sinks hold; losing one only causes rework.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.records import VideoRef
from core.review_settings import Decision


class VideoState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DELETED = "deleted"  # a tombstone: the video and its results were removed


class StageProgress(BaseModel):
    """One stage's progress on one video."""

    done: int = Field(
        default=0,
        description="Parts finished: chunks, the audio windows for `speech`, 1 for a stage "
        "that runs once per video.",
    )
    total: int | None = Field(
        default=None,
        description="Parts in all, once known: chunks once decoding has ended, audio windows "
        "once the audio track has.",
    )
    applicable: bool = Field(
        default=True,
        description="False when the stage has nothing to do for this video, as `speech` for a "
        "video without an audio track; such a stage counts as finished.",
    )


class VideoStatus(BaseModel):
    """Everything known about one video's processing; what the progress API returns."""

    model_config = ConfigDict(frozen=True)

    video_id: str
    tenant: str = "default"
    uri: str = ""
    status: VideoState
    pipeline_version: str = ""
    stage: str | None = None  # the stage working now (or that failed)
    stages: dict[str, StageProgress] = Field(default_factory=dict)
    attempts: int = 0
    epoch: int = 0
    owner: str | None = None  # the service instance running (or that last ran) the video
    lane: str = "fresh"  # the consumer lane of its latest event: "fresh" or "bulk"
    frames: int = 0
    chunks_total: int | None = None  # chunks in the video, once decoding has ended
    chunks_processed: int = 0  # chunks computed by the model stages, over every attempt
    chunks_restored: int = 0  # chunks taken from persisted outputs when an attempt resumed
    error_code: str | None = None
    error_message: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)  # stage -> seconds
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class OutboxEvent(BaseModel):
    """A notification to deliver (webhook, status topic); appended with the final transition."""

    model_config = ConfigDict(frozen=True)

    type: str  # "video.done" | "video.failed"
    video_id: str
    tenant: str
    pipeline_version: str
    callback_url: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    timestamp: datetime
    # The owner epoch of the attempt that failed; None for "done" (once per pipeline version)
    # and for a video never claimed.
    epoch: int | None = None

    @property
    def webhook_id(self) -> str:
        """Deterministic from (video, event type, pipeline version, epoch): every delivery of
        this entry carries the same id, while a failure of a later attempt (a new claim, so a
        new epoch) is a new message. Entries without an epoch keep the ids they always had."""
        key = f"{self.video_id}\x00{self.type}\x00{self.pipeline_version}"
        if self.epoch is not None:
            key += f"\x00{self.epoch}"
        return f"msg_{hashlib.sha256(key.encode()).hexdigest()[:32]}"


@dataclass(frozen=True)
class Claim:
    """The result of taking a video for processing."""

    epoch: int  # the owner epoch every later write must carry
    skip: bool  # True: already done for this pipeline version, nothing to do
    status: VideoStatus


@dataclass(frozen=True)
class ProgressEvent:
    video_id: str
    tenant: str
    status: VideoState
    stage: str | None
    done: int
    total: int | None
    at: datetime
    applicable: bool = True  # False: ``stage`` has nothing to do for this video


Verdict = Literal["approve", "remove"]
#: The review decisions that put a done video in its tenant's review queue.
QUEUED_DECISIONS: tuple[Decision, ...] = ("review", "block")
#: Every review queue cursor has this form, and every string of this form is one (so a schema
#: can say exactly which cursors are valid).
REVIEW_CURSOR_PATTERN = r"^[0-9]{1,19}:[0-9]{1,9}$"


@dataclass(frozen=True)
class ReviewOutcome:
    """What the review stage decided for a done video: its decision and each category's
    score, decision and number of findings (``runtime.messages.review_summary``); the
    evidence stays in the result document."""

    decision: Decision
    categories: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class ReviewItem:
    """A done video in its tenant's review queue, waiting for a reviewer's verdict."""

    video_id: str
    tenant: str
    pipeline_version: str
    done_at: datetime
    review: ReviewOutcome


@dataclass(frozen=True)
class GivenVerdict:
    """A reviewer's verdict on a video the review stage flagged, for one pipeline version."""

    id: str  # unique per verdict; also in the audit stream's entry
    video_id: str
    tenant: str
    verdict: Verdict
    reviewer: str
    note: str | None
    at: datetime
    pipeline_version: str  # the version whose result the verdict was given for
    decision: Decision  # the review stage's decision the verdict answers


class ReviewQueue(ABC):
    """Per tenant and decision (``review``, ``block``), the done videos the review stage
    flagged, oldest done first, until a reviewer gives a verdict. A video enters at
    ``mark_done`` and leaves with its verdict, when it is done again with another decision,
    and when it is processed again or deleted."""

    @abstractmethod
    async def page(
        self, *, tenant: str | None, decision: Decision, limit: int, cursor: str | None
    ) -> tuple[list[ReviewItem], str | None]:
        """Oldest done first (``tenant`` None: every tenant's); the page and the cursor of the
        next one (None at the end)."""

    @abstractmethod
    async def give_verdict(
        self,
        video_id: str,
        *,
        tenant: str | None,
        verdict: Verdict,
        reviewer: str,
        note: str | None,
    ) -> GivenVerdict:
        """Record the verdict on the video's record and in the audit stream and take the video
        out of the queue, in one atomic step. ``tenant``: the tenant asking (None: any).
        ``UnknownVideo`` for no video (or another tenant's), ``NotInReviewQueue`` for one that
        is not done with a decision the queue holds, ``VerdictGiven`` when its pipeline version
        has a verdict already."""

    @abstractmethod
    async def verdicts(self, video_id: str) -> list[GivenVerdict]:
        """Every verdict given for the video, oldest first (one per pipeline version at
        most); kept on its record, so as long as the record is."""


class CheckpointStore(ABC):
    """Per-video records. Every write after ``claim`` carries the claim's epoch; a write with
    an older epoch raises ``StaleEpoch`` so a stale worker can never overwrite a newer one."""

    @abstractmethod
    async def mark_queued(self, ref: VideoRef, pipeline_version: str) -> VideoStatus:
        """Record that an event arrived; keeps a done/running record as it is."""

    @abstractmethod
    async def claim(
        self,
        ref: VideoRef,
        pipeline_version: str,
        *,
        owner: str = "",
        lease_s: float = 0.0,
        lost_epoch: int | None = None,
    ) -> Claim:
        """Take the video: bump its epoch and set it running, held by ``owner`` for
        ``lease_s`` (renewed with ``renew``), unless it is done for this pipeline version or,
        after ``lost_epoch`` was lost to another attempt, that attempt settled it (then
        ``skip``). Raises ``VideoBusy`` while another owner's attempt holds a live lease: a
        claim never takes over a video whose owner still works on it."""

    @abstractmethod
    async def renew(self, video_id: str, epoch: int, *, lease_s: float) -> None:
        """Keep the attempt of ``epoch`` for ``lease_s`` more (0: let it go now, so another
        owner may take it over at once); ``StaleEpoch`` when it is no longer running."""

    @abstractmethod
    async def advance(
        self,
        video_id: str,
        epoch: int,
        stage: str,
        done: int,
        total: int | None = None,
        *,
        applicable: bool = True,
    ) -> None:
        """Record that ``stage`` has finished ``done`` chunks (of ``total``, once known);
        ``applicable=False``: the stage has nothing to do for this video (speech, without an
        audio track), which every progress view shows as finished. Each call says it anew."""

    @abstractmethod
    async def chunks_done(self, video_id: str) -> set[int]:
        """Chunks of the current attempt's pipeline version whose outputs are persisted."""

    @abstractmethod
    async def mark_chunk(
        self, video_id: str, epoch: int, index: int, *, restored: bool, total: int | None
    ) -> None:
        """Record that chunk ``index``'s outputs are persisted (computed now, or ``restored``
        from an earlier attempt's persisted outputs); ``total`` once the chunk count is known."""

    @abstractmethod
    async def mark_done(
        self,
        video_id: str,
        epoch: int,
        *,
        frames: int,
        timings: Mapping[str, float],
        outbox: OutboxEvent | None,
        also: Sequence[OutboxEvent] = (),
        review: ReviewOutcome | None = None,
    ) -> None:
        """Final transition to done and the outbox entry (None: nobody is notified), then the
        entries of ``also`` (a ``video.review`` beside the ``video.done``), in one atomic
        step; in the same step the record keeps ``review`` (None: the review stage did not
        run) and the video enters the review queue of its decision, or leaves the queue (see
        ``ReviewQueue``)."""

    @abstractmethod
    async def mark_failed(
        self,
        ref: VideoRef,
        epoch: int | None,
        *,
        code: str,
        message: str,
        pipeline_version: str,
        stage: str | None,
        outbox: OutboxEvent | None,
    ) -> bool:
        """Final transition to failed and the outbox entry, in one atomic step. ``epoch`` is
        None for a video that never got claimed (an invalid event): such a failure never
        changes the record of a video a valid event made known (queued, running, done, or
        failed after a claim) and returns False, having written nothing. True otherwise."""

    @abstractmethod
    async def mark_deleted(
        self, video_id: str, *, tenant: str | None, asked_ms: int, outbox: OutboxEvent | None
    ) -> bool:
        """The video deleted: its record becomes a tombstone (kept for
        ``redis.deleted_retention_s``) with the outbox entry, in one step; an attempt under way
        is fenced out (its epoch is no longer the record's). ``tenant``: the tenant asking
        (``VideoIdTaken`` if the video is another's), None for any. False when it was deleted
        already (nothing written)."""

    @abstractmethod
    async def event_of(self, video_id: str) -> VideoRef | None:
        """What the record keeps of the event that made it (its source, callback, metadata)."""

    @abstractmethod
    async def give_back(
        self, owner: VideoRef, epoch: int, *, pipeline_version: str, frames: int
    ) -> None:
        """The attempt ``epoch`` claimed an id whose results the sinks hold for another tenant
        (Redis had lost that video's record): the record goes back to ``owner`` (its tenant
        and source), done for ``pipeline_version``, and nobody is notified; the refused event
        leaves nothing of its own on the id."""

    @abstractmethod
    async def get(self, video_id: str) -> VideoStatus | None: ...

    @abstractmethod
    def progress(self) -> AsyncIterator[ProgressEvent]:
        """Live progress events of every video, from now on."""

    @abstractmethod
    async def read_outbox(
        self, consumer: str, *, count: int = 16, block_ms: int = 1000
    ) -> list[tuple[str, OutboxEvent]]:
        """Entries not yet acknowledged by the notifier group: first those this consumer
        already took and did not ack (after a crash), then new ones."""

    @abstractmethod
    async def ack_outbox(self, entry_ids: list[str]) -> None: ...

    async def rewind_outbox(self, consumer: str) -> None:  # noqa: B027 - optional hook
        """Start a new life of ``consumer``: its next reads return the entries it took and
        never acknowledged first. Within one life, an entry it holds unacknowledged (waiting
        for a retry) is not handed out again, so it cannot hold back newer ones."""

    @property
    @abstractmethod
    def reviews(self) -> ReviewQueue:
        """The review queue of the videos this store marked done."""

    @abstractmethod
    async def close(self) -> None: ...

    # Last in the class: its name would hide the built-in ``list`` in annotations below it.
    @abstractmethod
    async def list(
        self,
        *,
        status: VideoState | None = None,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[VideoStatus], str | None]:
        """Newest first; returns the page and the cursor of the next one (None at the end)."""
