"""One retry policy for every loop that tries again: a frozen description, run by tenacity.

A ``RetryPolicy`` says how long to wait after each failure (an exponential backoff from
``first_s`` up to ``max_s``, or an explicit ``schedule``), how far jitter spreads the waits,
how many attempts there are and which errors earn another. A ``RetryableError.retry_after``
wins over the computed wait: the side that failed knows best when it will be back. Each
subsystem builds its policies from its own settings where it uses them.

A wait can be abandoned: when the ``stop`` event given to ``call``/``attempts`` is set, the
wait ends at once with ``Abandoned``, so an owner that is stopping leaves the work for a
restart instead of sitting out a backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, AttemptManager, RetryCallState, retry_if_exception
from tenacity.stop import stop_after_attempt, stop_never

from core.errors import Abandoned, PermanentError, RetriesExhausted, RetryableError

T = TypeVar("T")

# Each wait drawn from the upper half of its backoff: callers that failed together spread
# out, and none comes back much sooner than the backoff asked.
HALF_JITTER = (0.5, 1.0)

_RANDOM = random.Random()  # noqa: S311 - jitter, not security


@dataclass(frozen=True)
class RetryFailure:
    """One failed attempt, as the ``on_failure`` hook sees it."""

    attempt: int  # 1 for the first
    error: BaseException
    delay: float | None  # seconds until the next attempt; None: no attempt is left


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed operation is tried again.

    Without ``schedule`` the wait after failure n is ``first_s * multiplier ** (n - 1)``, at
    most ``max_s``; with it, the wait is ``schedule[n - 1]``, its last entry repeating (an
    empty schedule: no wait). Each wait is multiplied by a factor drawn uniformly from
    ``jitter``. An error is retried when it is one of ``retry_on`` and none of ``never``;
    ``max_attempts`` None tries until it works. A run of ``patient`` failures counts as no
    attempt until it has lasted ``patience_s``; it then ends the retries.
    """

    first_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0
    schedule: tuple[float, ...] | None = None
    jitter: tuple[float, float] = (1.0, 1.0)
    max_attempts: int | None = None
    retry_on: tuple[type[BaseException], ...] = (RetryableError,)
    never: tuple[type[BaseException], ...] = (PermanentError,)
    # Failures of these kinds use up no attempt while they last less than ``patience_s`` in a
    # row (an outage of a dependency): the attempts are for failures of the work itself.
    patient: tuple[type[BaseException], ...] = ()
    patience_s: float = 0.0

    def __post_init__(self) -> None:
        low, high = self.jitter
        if not 0 <= low <= high:
            raise ValueError(f"jitter must be a range 0 <= low <= high, not {self.jitter}")
        if self.first_s < 0 or self.max_s < 0 or self.multiplier <= 0:
            raise ValueError("first_s and max_s must be >= 0, multiplier > 0")
        if self.schedule is not None and any(s < 0 for s in self.schedule):
            raise ValueError(f"a schedule has no negative waits: {self.schedule}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {self.max_attempts}")

    def delay(
        self, attempt: int, *, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the first)."""
        if retry_after is not None:
            return max(0.0, retry_after)
        if self.schedule is not None:
            wait = self.schedule[min(attempt, len(self.schedule)) - 1] if self.schedule else 0.0
        else:
            try:
                wait = min(self.max_s, self.first_s * self.multiplier ** (attempt - 1))
            except OverflowError:  # thousands of failures in: the cap long since applies
                wait = self.max_s
        low, high = self.jitter
        if low != high:
            wait *= (rng or _RANDOM).uniform(low, high)
        return wait

    def exhausted(self, attempt: int) -> bool:
        """Whether attempt number ``attempt`` was the last one allowed."""
        return self.max_attempts is not None and attempt >= self.max_attempts

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` earns another attempt."""
        return isinstance(error, self.retry_on) and not isinstance(error, (*self.never, Abandoned))

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        stop: asyncio.Event | None = None,
        on_failure: Callable[[RetryFailure], None] | None = None,
        rng: random.Random | None = None,
    ) -> T:
        """``await operation()`` until it returns. An error not retried is raised as it is;
        when the attempts run out, ``RetriesExhausted``; when ``stop`` is set during a wait
        (or before it), ``Abandoned``. ``on_failure`` sees every failure that is retried or
        is the last attempt's."""

        async def attempt() -> T:
            # tenacity awaits only coroutine functions; a lambda returning an awaitable is not.
            return await operation()

        result: T = await self._retrying(stop, on_failure, rng)(attempt)
        return result

    def attempts(
        self,
        *,
        stop: asyncio.Event | None = None,
        on_failure: Callable[[RetryFailure], None] | None = None,
        rng: random.Random | None = None,
    ) -> AsyncIterator[AttemptManager]:
        """The attempts as a loop, for work with steps outside the attempt (tenacity's
        ``async for attempt in ...: with attempt: ...``); what escapes a ``with attempt``
        block is judged as in ``call``, what is raised outside it goes up as it is."""
        return self._retrying(stop, on_failure, rng)

    def _retrying(
        self,
        stop: asyncio.Event | None,
        on_failure: Callable[[RetryFailure], None] | None,
        rng: random.Random | None,
    ) -> AsyncRetrying:
        def wait(state: RetryCallState) -> float:
            error = _error_of(state)
            retry_after = error.retry_after if isinstance(error, RetryableError) else None
            return self.delay(state.attempt_number, retry_after=retry_after, rng=rng)

        def before_sleep(state: RetryCallState) -> None:
            if on_failure is not None:
                on_failure(
                    RetryFailure(state.attempt_number, _error_of(state), state.upcoming_sleep)
                )

        def give_up(state: RetryCallState) -> None:
            error = _error_of(state)
            if on_failure is not None:
                on_failure(RetryFailure(state.attempt_number, error, None))
            raise RetriesExhausted(error, state.attempt_number) from error

        async def sleep(seconds: float) -> None:
            await sleep_unless_stopped(seconds, stop)

        return AsyncRetrying(
            sleep=sleep,
            stop=self._stop_rule(),
            wait=wait,
            retry=retry_if_exception(self.retries),
            before_sleep=before_sleep,
            retry_error_callback=give_up,
        )

    def _stop_rule(self) -> Callable[[RetryCallState], bool]:
        if not self.patient:
            limit = self.max_attempts
            return stop_never if limit is None else stop_after_attempt(limit)
        counted = 0  # failures that used up an attempt
        patient_since: float | None = None  # when the current run of patient failures began

        def give_up(state: RetryCallState) -> bool:
            nonlocal counted, patient_since
            now = time.monotonic()
            if isinstance(_error_of(state), self.patient):
                patient_since = now if patient_since is None else patient_since
                return now - patient_since >= self.patience_s
            counted, patient_since = counted + 1, None
            return self.exhausted(counted)

        return give_up


async def sleep_unless_stopped(seconds: float, stop: asyncio.Event | None) -> None:
    """Sleep ``seconds``; when ``stop`` is set, already or meanwhile, raise ``Abandoned`` at
    once."""
    if stop is None:
        await asyncio.sleep(max(0.0, seconds))
        return
    if seconds > 0 and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await stop.wait()
    if stop.is_set():
        raise Abandoned


def _error_of(state: RetryCallState) -> BaseException:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    if error is None:  # tenacity asks the policy only after a failure
        raise AssertionError("a retry decision without a failure")
    return error
