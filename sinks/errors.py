"""Errors of the sinks."""

from __future__ import annotations

from core.errors import DependencyUnavailable, PermanentError


class SinkUnavailable(DependencyUnavailable):
    """The table or object store could not be written right now."""

    code = "sink_unavailable"


class SinkRejected(PermanentError):
    """The store refused the write for a reason retrying cannot fix (permissions, schema)."""

    code = "sink_rejected"
