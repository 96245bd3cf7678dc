"""The two kinds of error every adapter maps its failures to.

Adapters (Kafka, Redis, S3, HTTP, FFmpeg) catch their library's exceptions once, at the
boundary, and raise one of these. Everything above the boundary only asks: retry or not?
"""

from __future__ import annotations

from typing import Self


class ReelsenseError(Exception):
    """Base of every error raised on purpose by reelsense.

    ``code`` is a stable, machine-readable reason (snake_case) that ends up in the video's
    failed status, in dead-letter headers and in webhooks. ``stage`` names the pipeline stage
    the error came from, where one did (it goes into the failed status too).
    """

    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, stage: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.stage = stage

    def with_stage(self, stage: str) -> Self:
        """This error, blamed on ``stage`` unless a stage nearer its cause was named already
        (a stage run inside the decoder is named before the decoder's stream is)."""
        if self.stage is None:
            self.stage = stage
        return self

    @property
    def message(self) -> str:
        return str(self)


class RetryableError(ReelsenseError):
    """A failure that may go away: a broker, store or endpoint down, a timeout."""

    code = "retryable"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        stage: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, stage=stage)
        self.retry_after = retry_after


class DependencyUnavailable(RetryableError):
    """One of the service's own dependencies (Redis, the object store, the tables, the broker)
    is down: nothing about the video, so it waits out the outage instead of failing for it."""

    code = "dependency_unavailable"


class PermanentError(ReelsenseError):
    """A failure that retrying cannot fix: bad input, a refused URL, a broken video."""

    code = "permanent"


class Abandoned(Exception):
    """A retry given up because its owner is stopping: the work is left for a restart."""


class RetriesExhausted(Exception):
    """Every attempt a retry policy allows has failed; ``error`` is the last failure."""

    def __init__(self, error: BaseException, attempts: int) -> None:
        super().__init__(f"gave up after {attempts} attempts: {type(error).__name__}: {error}")
        self.error = error
        self.attempts = attempts
