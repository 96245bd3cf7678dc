"""Errors raised by stages. Reason codes are part of the public contract (statuses, webhooks)."""

from __future__ import annotations

from core.errors import PermanentError, RetryableError


class FetchRefused(PermanentError):
    """The URI is not allowed: scheme, SSRF rules, path outside the file roots."""

    code = "fetch_refused"


class FetchFailed(RetryableError):
    """The source could not be read right now (endpoint down, timeout)."""

    code = "fetch_failed"


class SourceNotFound(PermanentError):
    code = "source_not_found"


class SourceTooLarge(PermanentError):
    code = "source_too_large"


class InvalidVideo(PermanentError):
    """The bytes are not a decodable video (corrupt, truncated, not a video at all)."""

    code = "invalid_video"


class LimitExceeded(PermanentError):
    """The video is valid but outside the configured limits (duration, size, fps, ...)."""

    code = "limit_exceeded"


class UnsupportedMedia(PermanentError):
    """Container or codec not allowed, or no video stream."""

    code = "unsupported_media"


class DecodeError(PermanentError):
    """Decoding failed part-way through."""

    code = "decode_error"


class StageFailed(PermanentError):
    """A video stage raised, or gave what it does not declare: the video fails with the
    stage named, since running the same stage on the same result again would fail the same
    way."""

    code = "stage_failed"
