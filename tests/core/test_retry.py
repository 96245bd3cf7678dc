"""The one retry policy: waits, jitter, retry_after, attempt limits, stopping, what retries."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from core.errors import Abandoned, PermanentError, RetriesExhausted, RetryableError
from core.retry import HALF_JITTER, RetryFailure, RetryPolicy, sleep_unless_stopped


class Flaky:
    """An operation that fails with ``errors`` in turn, then returns how often it was called."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.calls


def test_exponential_waits_double_up_to_the_cap() -> None:
    policy = RetryPolicy(first_s=0.5, max_s=4.0)
    assert [policy.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert policy.delay(5000) == 4.0  # far past float range: still the cap


def test_a_schedule_gives_each_wait_and_repeats_its_last() -> None:
    policy = RetryPolicy(schedule=(1.0, 5.0, 30.0))
    assert [policy.delay(n) for n in range(1, 6)] == [1.0, 5.0, 30.0, 30.0, 30.0]
    assert RetryPolicy(schedule=()).delay(3) == 0.0


def test_jitter_stays_within_its_range_and_spreads() -> None:
    rng = random.Random(3)
    half = RetryPolicy(first_s=8.0, max_s=8.0, jitter=HALF_JITTER)
    waits = [half.delay(1, rng=rng) for _ in range(2000)]
    assert all(4.0 <= w <= 8.0 for w in waits)
    assert min(waits) < 4.2
    assert max(waits) > 7.8
    around = RetryPolicy(schedule=(100.0,), jitter=(0.9, 1.1))
    waits = [around.delay(1, rng=rng) for _ in range(2000)]
    assert all(90.0 <= w <= 110.0 for w in waits)
    assert min(waits) < 91.0
    assert max(waits) > 109.0


def test_retry_after_wins_over_the_computed_wait() -> None:
    policy = RetryPolicy(schedule=(30.0,), jitter=HALF_JITTER)
    assert policy.delay(1, retry_after=7.0) == 7.0
    assert policy.delay(1, retry_after=0.0) == 0.0
    assert policy.delay(1, retry_after=-1.0) == 0.0


async def test_an_error_s_retry_after_sets_the_wait_of_a_call() -> None:
    policy = RetryPolicy(first_s=60.0, max_s=60.0)
    failures: list[RetryFailure] = []
    flaky = Flaky(RetryableError("busy", retry_after=0.01), RetryableError("no", retry_after=0.02))
    async with asyncio.timeout(5):  # a computed wait would be 60 s
        assert await policy.call(flaky, on_failure=failures.append) == 3
    assert [f.delay for f in failures] == [0.01, 0.02]
    assert [f.attempt for f in failures] == [1, 2]


async def test_attempts_run_out_with_the_last_error() -> None:
    errors = [RetryableError(f"down {n}") for n in range(5)]
    flaky = Flaky(*errors)
    failures: list[RetryFailure] = []
    policy = RetryPolicy(schedule=(0.0,), max_attempts=3)
    with pytest.raises(RetriesExhausted) as raised:
        await policy.call(flaky, on_failure=failures.append)
    assert flaky.calls == 3
    assert raised.value.error is errors[2]
    assert raised.value.attempts == 3
    assert raised.value.__cause__ is errors[2]
    assert [(f.attempt, f.error, f.delay) for f in failures] == [
        (1, errors[0], 0.0),
        (2, errors[1], 0.0),
        (3, errors[2], None),
    ]
    assert policy.exhausted(3)
    assert not policy.exhausted(2)
    assert not RetryPolicy().exhausted(10_000)


async def test_without_a_limit_it_tries_until_it_works() -> None:
    flaky = Flaky(*(RetryableError("down") for _ in range(20)))
    assert await RetryPolicy(first_s=0.0).call(flaky) == 21


async def test_a_lambda_returning_an_awaitable_is_awaited_each_attempt() -> None:
    flaky = Flaky(RetryableError("down"))
    assert await RetryPolicy(first_s=0.0).call(lambda: flaky()) == 2  # noqa: PLW0108 - the case
    assert flaky.calls == 2


async def test_permanent_and_unlisted_errors_are_raised_at_once() -> None:
    refused = PermanentError("bad input")
    flaky = Flaky(refused)
    failures: list[RetryFailure] = []
    with pytest.raises(PermanentError) as raised:
        await RetryPolicy(first_s=0.0).call(flaky, on_failure=failures.append)
    assert raised.value is refused
    assert flaky.calls == 1
    assert failures == []
    flaky = Flaky(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        await RetryPolicy(first_s=0.0).call(flaky)
    assert flaky.calls == 1


async def test_retry_on_and_never_choose_what_retries() -> None:
    everything = RetryPolicy(first_s=0.0, retry_on=(Exception,), never=())
    assert await everything.call(Flaky(PermanentError("x"), ValueError("y"))) == 3
    assert not everything.retries(Abandoned())  # stopping is never retried
    assert not everything.retries(asyncio.CancelledError())


async def test_a_stop_event_abandons_a_wait_at_once() -> None:
    stop = asyncio.Event()
    flaky = Flaky(*(RetryableError("down") for _ in range(3)))
    policy = RetryPolicy(first_s=60.0, max_s=60.0)
    started = time.monotonic()
    asyncio.get_running_loop().call_later(0.05, stop.set)
    with pytest.raises(Abandoned):
        await policy.call(flaky, stop=stop)
    assert time.monotonic() - started < 2.0
    assert flaky.calls == 1


async def test_a_stop_set_before_the_wait_abandons_without_waiting() -> None:
    stop = asyncio.Event()
    stop.set()
    flaky = Flaky(RetryableError("down"))
    failures: list[RetryFailure] = []
    started = time.monotonic()
    with pytest.raises(Abandoned):
        await RetryPolicy(first_s=60.0).call(flaky, stop=stop, on_failure=failures.append)
    assert time.monotonic() - started < 1.0
    assert flaky.calls == 1
    assert len(failures) == 1  # the failure was still counted
    assert await RetryPolicy().call(Flaky(), stop=stop) == 1  # no failure, nothing to abandon


async def test_sleep_unless_stopped() -> None:
    stop = asyncio.Event()
    await sleep_unless_stopped(0.01, stop)
    await sleep_unless_stopped(-1.0, None)
    stop.set()
    with pytest.raises(Abandoned):
        await sleep_unless_stopped(0.0, stop)


async def test_attempts_judge_only_what_escapes_the_attempt_block() -> None:
    policy = RetryPolicy(first_s=0.0, max_attempts=5)
    tried = 0
    async for attempt in policy.attempts():
        with attempt:
            tried += 1
            if tried < 3:
                raise RetryableError("down")
    assert tried == 3
    outside = RetryableError("outside")

    async def fail_outside() -> None:
        async for _attempt in policy.attempts():
            raise outside

    with pytest.raises(RetryableError) as raised:
        await fail_outside()
    assert raised.value is outside


def test_nonsense_policies_are_refused() -> None:
    for bad in (
        {"jitter": (1.0, 0.5)},
        {"jitter": (-0.1, 1.0)},
        {"max_attempts": 0},
        {"first_s": -1.0},
        {"schedule": (1.0, -2.0)},
    ):
        with pytest.raises(ValueError):  # noqa: PT011 - each message names its own field
            RetryPolicy(**bad)  # type: ignore[arg-type]
