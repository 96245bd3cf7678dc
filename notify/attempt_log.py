"""What the notifier writes down of each delivery attempt, and reads back before the next.

Each attempt is a ``DeliveryAttempt`` in the delivery log with its log line; a final failure
(failed, disabled, retries exhausted) also leaves a dead letter. A delivery log that cannot be
written or read is logged and passed over: delivery goes on, and at worst an attempt is made
again with the same ``webhook-id``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from core.errors import ReelsenseError
from notify.base import DeadLetter, DeliveryAttempt, DeliveryLog, DeliveryResult, Outcome
from notify.endpoints import utc_from
from notify.outbox import InHand

log = logging.getLogger(__name__)


async def record_attempt(
    delivery_log: DeliveryLog,
    entry: InHand,
    *,
    target: str,
    attempt: int,
    outcome: Outcome,
    result: DeliveryResult,
    at: float,
    next_at: float | None,
) -> None:
    """Attempt ``attempt`` of ``entry``'s message to ``target`` (made at ``at``, the
    notifier's clock), its log line, and a dead letter when its outcome is a failure; a log
    that cannot take it is logged and passed over."""
    now = utc_from(at)
    code = result.code
    if outcome is Outcome.DEAD_LETTERED:
        code = f"retries_exhausted:{result.code}" if result.code else "retries_exhausted"
    record = DeliveryAttempt(
        webhook_id=entry.message.id,
        video_id=entry.event.video_id,
        tenant=entry.event.tenant,
        type=entry.event.type,
        target=target,
        attempt=attempt,
        outcome=outcome,
        status_code=result.status_code,
        code=code,
        detail=result.detail,
        duration_ms=round(result.duration_s * 1000, 3),
        next_retry_at=datetime.fromtimestamp(next_at, UTC) if next_at is not None else None,
        at=now,
    )
    level = logging.INFO if outcome in (Outcome.DELIVERED, Outcome.RETRY) else logging.WARNING
    log.log(
        level,
        "webhook %s -> %s attempt %d: %s %s %s",
        entry.message.id,
        target,
        attempt,
        outcome.value,
        result.status_code or "",
        code or "",
    )
    try:
        await delivery_log.record(record)
        if outcome in (Outcome.FAILED, Outcome.DISABLED, Outcome.DEAD_LETTERED):
            await delivery_log.add_dead_letter(
                DeadLetter(
                    webhook_id=entry.message.id,
                    target=target,
                    event=entry.event,
                    outcome=outcome,
                    code=code,
                    detail=result.detail,
                    attempts=attempt,
                    at=now,
                )
            )
    except ReelsenseError as exc:
        log.warning("delivery log write failed: %s", exc)


async def last_attempt(
    delivery_log: DeliveryLog, webhook_id: str, target: str
) -> DeliveryAttempt | None:
    """The last attempt logged of ``webhook_id`` to ``target``; None when there is none or
    the log cannot be read (the delivery then starts afresh)."""
    try:
        return await delivery_log.last_attempt(webhook_id, target)
    except ReelsenseError as exc:
        log.warning("delivery log unreadable, starting %s afresh: %s", webhook_id, exc)
        return None
