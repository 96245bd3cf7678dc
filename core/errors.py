"""The two kinds of error every adapter maps its failures to.

Adapters (Kafka, Redis, S3, HTTP, FFmpeg) catch their library's exceptions once, at the
boundary, and raise one of these. Everything above the boundary only asks: retry or not?
"""

from __future__ import annotations


class ReelsenseError(Exception):
    """Base of every error raised on purpose by reelsense.

    ``code`` is a stable, machine-readable reason (snake_case) that ends up in the video's
    failed status, in dead-letter headers and in webhooks.
    """

    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class RetryableError(ReelsenseError):
    """A failure that may go away: a broker, store or endpoint down, a timeout."""

    code = "retryable"

    def __init__(
        self, message: str, *, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class PermanentError(ReelsenseError):
    """A failure that retrying cannot fix: bad input, a refused URL, a broken video."""

    code = "permanent"
