"""Errors of the consumers."""

from __future__ import annotations

from core.errors import DependencyUnavailable, PermanentError


class InvalidEvent(PermanentError):
    """An upload event that cannot be processed. ``video_id`` is set when one could be read,
    so the video still gets a failed status with the reason; ``tenant`` when the body named a
    valid one, so that tenant sees it (else the default tenant)."""

    code = "invalid_event"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        video_id: str | None = None,
        tenant: str | None = None,
    ):
        super().__init__(message, code=code)
        self.video_id = video_id
        self.tenant = tenant


class BrokerUnavailable(DependencyUnavailable):
    code = "broker_unavailable"
