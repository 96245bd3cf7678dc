"""Errors of the checkpoint store."""

from __future__ import annotations

from core.errors import PermanentError, RetryableError


class StaleEpoch(PermanentError):
    """A write carried an older owner epoch than the record's: another attempt owns the video."""

    code = "stale_epoch"


class VideoIdTaken(PermanentError):
    """The id names another tenant's video: a record is never shared between tenants, and
    the event is refused without touching it."""

    code = "video_id_taken"


class CheckpointLost(RetryableError):
    """The video's record is gone (Redis flushed or restored from an older state)."""

    code = "checkpoint_lost"


class CheckpointUnavailable(RetryableError):
    """Redis could not be reached or timed out."""

    code = "checkpoint_unavailable"
