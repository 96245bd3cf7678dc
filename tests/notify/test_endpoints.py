"""Endpoint health: failure streaks and the rules that disable an endpoint."""

from __future__ import annotations

from notify.base import DeliveryResult, EndpointState, Outcome
from notify.delivery_log import MemoryDeliveryLog
from notify.endpoints import EndpointHealth
from tests.notify.support import notify_settings

URL = "https://hooks.example.com/x"
DAY = 86400.0
FAIL = DeliveryResult(Outcome.RETRY, 503, code="webhook_http_error")
OK = DeliveryResult(Outcome.DELIVERED, 200)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_failing_for_days_disables() -> None:
    clock, log = Clock(), MemoryDeliveryLog()
    health = EndpointHealth(log, notify_settings(disable_after_s=5 * DAY), clock)
    state = await health.update(URL, FAIL)
    assert (state.consecutive_failures, state.disabled) == (1, False)
    clock.now += 4 * DAY
    assert not (await health.update(URL, FAIL)).disabled
    clock.now += DAY
    state = await health.update(URL, FAIL)
    assert state.disabled
    assert state.disabled_reason == "webhook_endpoint_failing"
    assert (await log.endpoint(URL)) == state  # kept where other processes see it


async def test_a_success_resets_the_streak() -> None:
    clock = Clock()
    health = EndpointHealth(MemoryDeliveryLog(), notify_settings(disable_after_s=DAY), clock)
    await health.update(URL, FAIL)
    clock.now += DAY - 1
    state = await health.update(URL, OK)
    assert (state.consecutive_failures, state.failing_since) == (0, None)
    clock.now += 10
    assert not (await health.update(URL, FAIL)).disabled


async def test_consecutive_failure_limit_and_off_switches() -> None:
    clock = Clock()
    limited = EndpointHealth(
        MemoryDeliveryLog(), notify_settings(disable_after_failures=3, disable_after_s=None), clock
    )
    states = [await limited.update(URL, FAIL) for _ in range(3)]
    assert [s.disabled for s in states] == [False, False, True]

    never = EndpointHealth(
        MemoryDeliveryLog(),
        notify_settings(disable_after_failures=None, disable_after_s=None),
        clock,
    )
    for _ in range(50):
        clock.now += DAY
        state = await never.update(URL, FAIL)
    assert not state.disabled
    assert state.consecutive_failures == 50


async def test_gone_disables_at_once_and_can_be_enabled_again() -> None:
    log = MemoryDeliveryLog()
    health = EndpointHealth(log, notify_settings(), Clock())
    state = await health.update(
        URL, DeliveryResult(Outcome.DISABLED, 410, code="webhook_endpoint_gone")
    )
    assert (state.disabled, state.disabled_reason, state.last_status_code) == (
        True,
        "webhook_endpoint_gone",
        410,
    )
    assert (await health.get(URL)).disabled
    await health.save(EndpointState(url=URL))
    assert not (await health.get(URL)).disabled
