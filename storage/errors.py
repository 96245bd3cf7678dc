"""Errors of the object stores.

Their codes are the sinks' (``sink_unavailable``, ``sink_rejected``): to a user, a result or a
chunk that cannot be stored is a sink that cannot be written.
"""

from __future__ import annotations

from core.errors import DependencyUnavailable, PermanentError


class StoreUnavailable(DependencyUnavailable):
    """The object store could not be reached or written right now."""

    code = "sink_unavailable"


class StoreAccessDenied(StoreUnavailable):
    """The object store refused the service's credentials (denied, unknown or expired key, a
    signature that does not match): an outage of the service's own access, such as a
    credential rotation under way, waited out like any other (``runtime.outage_window_s``)."""

    code = "sink_access_denied"


class StoreRejected(PermanentError):
    """The object store refused for a reason retrying cannot fix (a bad key or bucket)."""

    code = "sink_rejected"
