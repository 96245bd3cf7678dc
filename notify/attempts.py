"""One webhook attempt: the endpoint's health read and updated, one of the notifier's
connections and one of the endpoint's share taken, the attempt logged, and when to try next.

Both ways an attempt is made go through here: the first attempt of an outbox entry's message
(``notify.dispatcher``) and a retry taken from the schedule (``notify.scheduled``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from checkpoint.base import OutboxEvent
from core.config import NotifySettings
from core.retry import RetryPolicy
from notify.attempt_log import record_attempt
from notify.base import DeliveryLog, DeliveryResult, EndpointState, Outcome, WebhookDelivery
from notify.endpoints import EndpointHealth, EndpointShares
from notify.outbox import InHand


class WebhookAttempts:
    """Makes attempts; ``on_disabled`` hears of an endpoint an attempt has just disabled."""

    def __init__(
        self,
        sender: WebhookDelivery,
        delivery_log: DeliveryLog,
        settings: NotifySettings,
        *,
        clock: Callable[[], float],
        rng: random.Random,
        on_disabled: Callable[[OutboxEvent, EndpointState], None],
    ) -> None:
        self._sender = sender
        self._log = delivery_log
        self._clock = clock
        self._rng = rng
        self._on_disabled = on_disabled
        self.health = EndpointHealth(delivery_log, settings, clock)
        self.shares = EndpointShares(settings.max_concurrency_per_endpoint)
        self._slots = asyncio.Semaphore(settings.max_concurrency)
        # Webhooks: the durable schedule; the attempt after the last wait is the last one.
        spread = settings.jitter
        self._schedule = RetryPolicy(
            schedule=settings.retry_schedule_s,
            jitter=(max(0.0, 1 - spread), 1 + spread),
            max_attempts=len(settings.retry_schedule_s) + 1,
        )

    async def make(
        self, entry: InHand, url: str, target: str, attempt: int
    ) -> tuple[Outcome, float | None]:
        """Attempt ``attempt`` of ``entry``'s message to ``url`` (``target`` as shown), its
        endpoint share already taken by the caller; recorded in the log. Its outcome, and when
        to try again for a retry."""
        state = await self.health.get(target)
        if state.disabled:
            result = DeliveryResult(
                Outcome.DISABLED, code="webhook_endpoint_disabled", detail="not sent"
            )
        else:
            async with self._slots:
                result = await self._sender.deliver(url, entry.message)
            state = await self.health.update(target, result)
            if state.disabled:  # by this attempt
                self._on_disabled(entry.event, state)
        outcome, next_at = self._next(result, state, attempt)
        await record_attempt(
            self._log,
            entry,
            target=target,
            attempt=attempt,
            outcome=outcome,
            result=result,
            at=self._clock(),
            next_at=next_at,
        )
        return outcome, next_at

    def _next(
        self, result: DeliveryResult, state: EndpointState, attempt: int
    ) -> tuple[Outcome, float | None]:
        """The attempt's final word, and when to try again if it is a retry."""
        if result.outcome is not Outcome.RETRY:
            return result.outcome, None
        if state.disabled:
            return Outcome.DISABLED, None
        if self._schedule.exhausted(attempt):
            return Outcome.DEAD_LETTERED, None
        delay = self._schedule.delay(attempt, retry_after=result.retry_after, rng=self._rng)
        return Outcome.RETRY, self._clock() + delay
