"""Errors of the sinks."""

from __future__ import annotations

from core.errors import DependencyUnavailable, PermanentError


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
