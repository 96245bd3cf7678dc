"""Errors of the object stores.

Their codes are the sinks' (``sink_unavailable``, ``sink_rejected``): to a user, a result or a
chunk that cannot be stored is a sink that cannot be written.
"""

from __future__ import annotations

from core.errors import DependencyUnavailable, PermanentError


class StoreUnavailable(DependencyUnavailable):
    """The object store could not be reached or written right now."""

    code = "sink_unavailable"


class StoreRejected(PermanentError):
    """The object store refused for a reason retrying cannot fix (permissions, bad key)."""

    code = "sink_rejected"
