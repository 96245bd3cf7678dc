"""What a notifier works on: the outbox entries in hand, the targets of each, and the store
protocol through which notifiers hold entries and take over those of one that went away."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from checkpoint.base import OutboxEvent
from core.config import WebhookSubscription
from notify.base import Outcome, WebhookMessage


@runtime_checkable
class ReclaimingStore(Protocol):
    """A store that can hand over entries another consumer took and never acked, and lets a
    live consumer keep the entries it works on."""

    async def reclaim_outbox(
        self, consumer: str, min_idle_ms: int, *, count: int = 16
    ) -> list[tuple[str, OutboxEvent]]: ...

    async def hold_outbox(self, consumer: str, entry_ids: list[str]) -> list[str]: ...


class TakenOver(Exception):
    """Another notifier took the entry over (this one was thought gone): it sends it now."""


def only(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(only(e, kind) for e in exc.exceptions)
    return isinstance(exc, kind)


def targets_for(event: OutboxEvent, subscriptions: tuple[WebhookSubscription, ...]) -> list[str]:
    """The event's own callback URL, then every subscription matching tenant and type."""
    urls = [event.callback_url] if event.callback_url else []
    urls += [
        sub.url
        for sub in subscriptions
        if (sub.tenant is None or sub.tenant == event.tenant) and event.type in sub.events
    ]
    return list(dict.fromkeys(urls))


@dataclass
class InHand:
    """An outbox entry a notifier works on: its message, targets and the task sending it."""

    entry_id: str
    event: OutboxEvent
    message: WebhookMessage
    targets: list[str]
    task: asyncio.Task[None] | None = None
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    taken_over: bool = False  # another notifier holds it now: no more attempts from here
    sending: int = 0  # attempts under way, each finished and recorded even when taken over
