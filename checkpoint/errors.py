"""Errors of the checkpoint store."""

from __future__ import annotations

from core.errors import DependencyUnavailable, PermanentError, RetryableError


class StaleEpoch(PermanentError):
    """A write carried an older owner epoch than the record's: another attempt owns the video."""

    code = "stale_epoch"


class VideoIdTaken(PermanentError):
    """The id names another tenant's video: a record is never shared between tenants, and
    the event is refused without touching it."""

    code = "video_id_taken"


class VideoBusy(RetryableError):
    """Another owner's attempt at the video holds a live lease: it is not taken over until
    that owner finishes, lets it go or stops renewing (``retry_after``: seconds left)."""

    code = "video_busy"


class CheckpointLost(DependencyUnavailable):
    """The video's record is gone (Redis flushed or restored from an older state). Nothing
    about the video: a failover can lose a record's latest writes, and a restarted primary
    can serve its older data set for a while before it follows the new one, so a claim made
    afresh may find its record gone again until Redis settles. It is waited out as an outage
    of Redis (``runtime.outage_window_s``), not counted against the video's attempts."""

    code = "checkpoint_lost"


class CheckpointUnavailable(DependencyUnavailable):
    """Redis could not be reached or timed out."""

    code = "checkpoint_unavailable"


class CheckpointNotDurable(PermanentError):
    """The Redis server cannot confirm that an acknowledged write is on disk (no WAITAOF and
    no ``appendfsync always``), and ``redis.require_durable`` asks for it."""

    code = "redis_not_durable"


class UnknownVideo(PermanentError):
    """No record holds the video, or it is another tenant's (the two are told apart to
    nobody: ids must not leak between tenants)."""

    code = "not_found"


class NotInReviewQueue(PermanentError):
    """A verdict for a video that is not in the review queue: not done, or done with a
    decision the queue does not hold (``pass``, or the review stage did not run)."""

    code = "not_in_review_queue"


class VerdictGiven(PermanentError):
    """A verdict for a video whose pipeline version has one already."""

    code = "verdict_given"
