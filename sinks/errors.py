"""Errors of the sinks."""

from __future__ import annotations

from core.errors import DependencyUnavailable, PermanentError, ReelsenseError, RetryableError


class SinkUnavailable(DependencyUnavailable):
    """The table or object store could not be written right now."""

    code = "sink_unavailable"


class SinkAccessDenied(SinkUnavailable):
    """The table's store refused the service's credentials: an outage of its own access (a
    credential rotation under way), waited out like any other."""

    code = "sink_access_denied"


class SinkRejected(PermanentError):
    """The store refused the write for a reason retrying cannot fix (a schema, a bucket)."""

    code = "sink_rejected"


def as_sink_error(exc: BaseException, sink: str) -> ReelsenseError:
    """Any failure of a sink as SinkUnavailable (retry later) or SinkRejected (do not)."""
    if isinstance(exc, SinkUnavailable | SinkRejected):
        return exc
    if isinstance(exc, PermanentError):
        return SinkRejected(f"{sink}: {exc}", code=exc.code)
    if isinstance(exc, RetryableError):
        return SinkUnavailable(f"{sink}: {exc}", code=exc.code, retry_after=exc.retry_after)
    # Unknown failures are retried: the caller's retry budget bounds them, and a lost
    # result is worse than a repeated attempt.
    return SinkUnavailable(f"{sink}: {type(exc).__name__}: {exc}")
