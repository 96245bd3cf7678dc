"""Endpoint health: failure streaks per target URL, and when an endpoint gets disabled.

Kept in the delivery log so every notifier process and the API see the same state. Counters
are read-modify-write without a lock: two processes failing at once may count one failure
short, which only delays a disable a little.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

from core.config import NotifySettings
from core.errors import ReelsenseError
from notify.base import DeliveryLog, DeliveryResult, EndpointState, Outcome

log = logging.getLogger(__name__)


def utc_from(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


class EndpointHealth:
    """Per-URL failure streaks and the disabled flag, kept in the delivery log so every
    notifier process and the API see the same state."""

    def __init__(
        self, log_: DeliveryLog, settings: NotifySettings, clock: Callable[[], float]
    ) -> None:
        self._log = log_
        self._settings = settings
        self._clock = clock
        self._cache: dict[str, EndpointState] = {}

    async def get(self, url: str) -> EndpointState:
        try:
            found = await self._log.endpoint(url)
        except ReelsenseError as exc:
            log.warning("endpoint state of %s unreadable, using the last known: %s", url, exc)
            found = None
        state = found or self._cache.get(url) or EndpointState(url=url)
        self._cache[url] = state
        return state

    async def update(self, url: str, result: DeliveryResult) -> EndpointState:
        """Fold one attempt's result into the endpoint's state; disables it when due."""
        before = await self.get(url)
        now = utc_from(self._clock())
        if result.outcome is Outcome.DELIVERED:
            state = EndpointState(url=url, last_status_code=result.status_code)
        elif result.outcome is Outcome.DISABLED:
            state = before.model_copy(
                update={
                    "disabled": True,
                    "disabled_reason": result.code,
                    "disabled_at": now,
                    "last_status_code": result.status_code,
                }
            )
        else:
            failures = before.consecutive_failures + 1
            since = before.failing_since or now
            limit_n = self._settings.disable_after_failures
            limit_s = self._settings.disable_after_s
            too_long = limit_s is not None and (now - since).total_seconds() >= limit_s
            too_many = limit_n is not None and failures >= limit_n
            disable = not before.disabled and (too_long or too_many)
            state = before.model_copy(
                update={
                    "consecutive_failures": failures,
                    "failing_since": since,
                    "last_status_code": result.status_code,
                    **(
                        {
                            "disabled": True,
                            "disabled_reason": "webhook_endpoint_failing",
                            "disabled_at": now,
                        }
                        if disable
                        else {}
                    ),
                }
            )
        if state.model_copy(update={"updated_at": before.updated_at}) == before:
            return before  # unchanged: nothing to save
        return await self.save(state)

    async def save(self, state: EndpointState) -> EndpointState:
        """Keep ``state`` (stamped with when); the state as kept."""
        state = state.model_copy(update={"updated_at": utc_from(self._clock())})
        self._cache[state.url] = state
        try:
            await self._log.save_endpoint(state)
        except ReelsenseError as exc:
            log.warning("endpoint state of %s not saved: %s", state.url, exc)
        return state


class EndpointShares:
    """Attempts under way per endpoint, ``per_endpoint`` at most: an endpoint that hangs or
    answers slowly holds that many of the notifier's connections, never all of them. Taken
    and given back on the loop, with no await between the check and the count."""

    def __init__(self, per_endpoint: int) -> None:
        self._per_endpoint = per_endpoint
        self._busy: Counter[str] = Counter()

    def take(self, target: str) -> bool:
        """One more attempt to ``target`` may start now (and is counted); False when its
        share is in use."""
        if self._busy[target] >= self._per_endpoint:
            return False
        self._busy[target] += 1
        return True

    def give(self, target: str) -> None:
        self._busy[target] -= 1
        if self._busy[target] <= 0:
            del self._busy[target]
