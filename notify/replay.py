"""Replay of a webhook dead letter: one more signed delivery, by an operator's decision.

The message is rebuilt from the stored outbox event, so it carries the same ``webhook-id`` and
body as every earlier attempt (receivers deduplicate on the id). The attempt is recorded in
the delivery log like any other; a delivery removes the dead letter and resets the endpoint's
failure streak (it re-enables a disabled endpoint: the operator has fixed it), a failure keeps
the dead letter with the new attempt count and reason. A replay is not retried by itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from core.config import NotifySettings, WebhookSubscription
from core.urls import redact_url
from notify.base import (
    DeadLetter,
    DeliveryAttempt,
    DeliveryLog,
    DeliveryResult,
    Outcome,
    WebhookDelivery,
    WebhookMessage,
)
from notify.endpoints import EndpointHealth
from notify.errors import TargetRefused
from notify.outbox import targets_for


def target_url(letter: DeadLetter, subscriptions: tuple[WebhookSubscription, ...]) -> str:
    """The URL to send to. The log keeps targets without credentials; the full URL is found
    again among the event's own callback URL and the subscriptions. Raises ``TargetRefused``
    when a target that had credentials is no longer configured."""
    for candidate in targets_for(letter.event, subscriptions):
        if redact_url(candidate) == letter.target:
            return candidate
    if "***@" in letter.target:
        raise TargetRefused(
            f"{letter.target} is no longer configured and its credentials are not kept"
        )
    return letter.target


class WebhookReplayer:
    """Sends dead-lettered webhooks once more and books the result."""

    def __init__(
        self,
        delivery_log: DeliveryLog,
        sender: WebhookDelivery,
        settings: NotifySettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._log = delivery_log
        self._sender = sender
        self._settings = settings
        self._clock = clock
        self._health = EndpointHealth(delivery_log, settings, clock)

    async def close(self) -> None:
        await self._sender.close()

    async def replay(self, letter: DeadLetter) -> DeliveryAttempt:
        """One delivery attempt of ``letter``'s message to its target; returns the attempt
        as recorded (outcome ``delivered``, ``failed`` or ``disabled``)."""
        message = WebhookMessage.from_event(letter.event)
        try:
            url = target_url(letter, self._settings.subscriptions)
        except TargetRefused as exc:
            result = DeliveryResult(Outcome.FAILED, code=exc.code, detail=exc.message)
        else:
            result = await self._sender.deliver(url, message)
            await self._health.update(letter.target, result)
        # No retry is scheduled for a replay: a transient failure is final for this attempt.
        outcome = result.outcome if result.outcome is not Outcome.RETRY else Outcome.FAILED
        now = datetime.fromtimestamp(self._clock(), UTC)
        attempt = DeliveryAttempt(
            webhook_id=message.id,
            video_id=letter.event.video_id,
            tenant=letter.event.tenant,
            type=letter.event.type,
            target=letter.target,
            attempt=letter.attempts + 1,
            outcome=outcome,
            status_code=result.status_code,
            code=result.code,
            detail=result.detail,
            duration_ms=round(result.duration_s * 1000, 3),
            at=now,
        )
        await self._log.record(attempt)
        if outcome is Outcome.DELIVERED:
            await self._log.remove_dead_letter(letter.webhook_id, letter.target)
        else:
            await self._log.add_dead_letter(
                letter.model_copy(
                    update={
                        "outcome": outcome,
                        "code": result.code,
                        "detail": result.detail,
                        "attempts": attempt.attempt,
                        "at": now,
                    }
                )
            )
        return attempt
