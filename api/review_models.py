"""The review queue as the API answers it (``/v1/review``): the videos the review stage
flagged, and the verdicts reviewers give them (``checkpoint.base.ReviewQueue``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from core.review_settings import Decision

QueuedDecision = Literal["review", "block"]


class ReviewCategorySummary(BaseModel):
    """One review category as the review stage scored it (its evidence is in the result)."""

    model_config = ConfigDict(frozen=True)

    score: float | None = Field(
        description="The chance, 0 to 1, that at least one of its findings is right."
    )
    decision: Decision | None = Field(
        description="Where its score sends the video, by the category's thresholds."
    )
    findings: int | None = Field(description="How many findings the category has.")


class ReviewQueueItem(BaseModel):
    """A done video the review stage flagged, waiting for a reviewer's verdict."""

    model_config = ConfigDict(frozen=True)

    video_id: str
    tenant: str
    decision: QueuedDecision = Field(
        description="The review stage's decision for the video: the worst of its categories'."
    )
    done_at: datetime = Field(description="When the video was done; the queue is oldest first.")
    pipeline_version: str = Field(
        description="The pipeline version of the result reviewed; a verdict is for it."
    )
    categories: dict[str, ReviewCategorySummary] = Field(
        description="Each review category (`contact`, `qr`, `terms`, `visual`): its score, "
        "decision and number of findings."
    )
    result: str = Field(
        description="Link to the video's result, whose `outputs.review` holds the evidence "
        "(where, when, what, the frame and the box)."
    )


class ReviewQueuePage(BaseModel):
    """One page of a review queue, oldest done first."""

    items: list[ReviewQueueItem]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` to read the next page; null at the end."
    )


class VerdictRequest(BaseModel):
    """A reviewer's verdict on a video in the review queue."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["approve", "remove"] = Field(
        description="`approve`: the video may stay up; `remove`: it goes down. What follows "
        "is the platform's to do: the verdict is recorded and audited here."
    )
    reviewer: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)
    ] = Field(description="Who gives the verdict, as the platform names its reviewers.")
    note: Annotated[str, StringConstraints(strip_whitespace=True, max_length=1000)] | None = Field(
        default=None, description="Why, in the reviewer's words (optional)."
    )


class ReviewVerdict(BaseModel):
    """A verdict given, as recorded on the video and in the audit stream."""

    # Built from a ``GivenVerdict`` as it is: ``ReviewVerdict.model_validate(given)``.
    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: str = Field(description="The verdict's id; its audit entry carries it too.")
    video_id: str
    tenant: str
    verdict: Literal["approve", "remove"]
    reviewer: str
    note: str | None
    at: datetime = Field(description="When it was recorded (the store's clock).")
    pipeline_version: str = Field(
        description="The pipeline version whose result the verdict was given for; a video "
        "processed again by another version comes back to the queue by its new decision."
    )
    decision: QueuedDecision = Field(description="The review stage's decision it answers.")


class ReviewHistory(BaseModel):
    """Every verdict given for a video, oldest first: at most one per pipeline version."""

    video_id: str
    verdicts: list[ReviewVerdict]
