"""Interfaces of the notifier: webhook delivery, the status topic and the delivery log.

The dispatcher reads the outbox, hands each message to a ``WebhookDelivery`` per target and to
a ``StatusPublisher``, records every attempt in a ``DeliveryLog``, and acks the outbox entry
once every target has reached a final outcome or has its next attempt in the log's schedule.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from checkpoint.base import OutboxEvent

_IDENTITY = frozenset({"video_id", "tenant", "pipeline_version"})


class Outcome(StrEnum):
    """What became of one delivery attempt (or of the delivery, for the final ones)."""

    DELIVERED = "delivered"  # 2xx
    RETRY = "retry"  # failed; another attempt is scheduled
    FAILED = "failed"  # refused for good for this message (4xx, refused target)
    DISABLED = "disabled"  # the endpoint is disabled (410, or failing for too long)
    DEAD_LETTERED = "dead_lettered"  # the retry schedule ran out

    @property
    def final(self) -> bool:
        return self is not Outcome.RETRY


@dataclass(frozen=True)
class WebhookMessage:
    """One Standard Webhooks message: the same id and body on every attempt."""

    id: str
    type: str
    body: bytes

    @classmethod
    def from_event(cls, event: OutboxEvent) -> WebhookMessage:
        """The payload shape of Standard Webhooks: ``{"type", "timestamp", "data"}``."""
        payload = {
            "type": event.type,
            "timestamp": _iso(event.timestamp),
            "data": {
                "video_id": event.video_id,
                "tenant": event.tenant,
                "pipeline_version": event.pipeline_version,
                # The identity above is the event's own; data cannot override it.
                **{k: v for k, v in event.data.items() if k not in _IDENTITY},
            },
        }
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str)
        return cls(id=event.webhook_id, type=event.type, body=body.encode())


@dataclass(frozen=True)
class DeliveryResult:
    """How one HTTP attempt went, classified.

    ``retry_after`` is the delay (seconds) the endpoint asked for, when it asked; ``code`` is a
    stable reason for anything but a delivery.
    """

    outcome: Outcome
    status_code: int | None = None
    retry_after: float | None = None
    code: str | None = None
    detail: str = ""
    duration_s: float = 0.0


class DeliveryAttempt(BaseModel):
    """One line of the delivery log."""

    model_config = ConfigDict(frozen=True)

    webhook_id: str
    video_id: str
    tenant: str
    type: str
    target: str
    attempt: int  # 1-based
    outcome: Outcome
    status_code: int | None = None
    code: str | None = None
    detail: str = ""
    duration_ms: float = 0.0
    next_retry_at: datetime | None = None
    at: datetime


class EndpointState(BaseModel):
    """The health of one target URL, shared by every message sent to it."""

    model_config = ConfigDict(frozen=True)

    url: str
    consecutive_failures: int = 0
    failing_since: datetime | None = None  # first failure of the current streak
    disabled: bool = False
    disabled_reason: str | None = None
    disabled_at: datetime | None = None
    last_status_code: int | None = None
    updated_at: datetime | None = None  # when this state was saved (pruned long after)


class DeadLetter(BaseModel):
    """A message one target never accepted, kept for an operator to inspect or replay."""

    model_config = ConfigDict(frozen=True)

    webhook_id: str
    target: str
    event: OutboxEvent
    outcome: Outcome
    code: str | None = None
    detail: str = ""
    attempts: int
    at: datetime


class ScheduledRetry(BaseModel):
    """A later attempt of one message to one target, waiting for its time in the delivery
    log's schedule rather than in a notifier's memory: the outbox entry that asked for it is
    acknowledged, so one endpoint's failures hold nothing else back."""

    model_config = ConfigDict(frozen=True)

    event: OutboxEvent
    url: str  # as it is sent (the outbox's own copy), credentials included: never shown
    target: str  # as it is shown and logged
    attempt: int  # the attempt to make, 1-based
    due_at: float  # when, in seconds since the epoch

    @property
    def id(self) -> str:
        return f"{self.event.webhook_id} {self.target}"


class WebhookDelivery(ABC):
    """Sends one signed message to one URL, once, and classifies what happened."""

    @abstractmethod
    async def deliver(self, url: str, message: WebhookMessage) -> DeliveryResult:
        """One attempt. Never raises for what the endpoint did; every failure is a result."""

    @abstractmethod
    async def close(self) -> None: ...


class StatusPublisher(ABC):
    """Publishes final video events to a Kafka topic for systems that prefer a stream."""

    @property
    @abstractmethod
    def topic(self) -> str: ...

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def publish(self, event: OutboxEvent) -> None:
        """Publish once; raises a ``RetryableError`` when the broker cannot take it now, a
        ``PermanentError`` (``StatusPublishRefused``) when it never will."""

    @abstractmethod
    async def stop(self) -> None: ...


class DeliveryLog(ABC):
    """Every attempt, the endpoints' health and the dead letters; what the API shows."""

    @abstractmethod
    async def record(self, attempt: DeliveryAttempt) -> None: ...

    @abstractmethod
    async def attempts(self, webhook_id: str) -> list[DeliveryAttempt]:
        """Attempts of one message, oldest first (the newest ``log_max_attempts`` at most)."""

    @abstractmethod
    async def attempts_for_video(self, video_id: str) -> list[DeliveryAttempt]:
        """Attempts of every message about one video, oldest first."""

    async def last_attempt(self, webhook_id: str, target: str) -> DeliveryAttempt | None:
        """The newest attempt of one message to one target: where a restart resumes."""
        found = [a for a in await self.attempts(webhook_id) if a.target == target]
        return found[-1] if found else None

    @abstractmethod
    async def endpoint(self, url: str) -> EndpointState | None: ...

    @abstractmethod
    async def save_endpoint(self, state: EndpointState) -> None: ...

    @abstractmethod
    async def endpoints(self) -> list[EndpointState]: ...

    @abstractmethod
    async def add_dead_letter(self, letter: DeadLetter) -> None: ...

    @abstractmethod
    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Newest first."""

    @abstractmethod
    async def remove_dead_letter(self, webhook_id: str, target: str) -> None: ...

    @abstractmethod
    async def prune(self, before: datetime) -> int:
        """Drop dead letters made, and endpoint states saved, before ``before`` (the attempts
        expire on their own); how many went. Their number would otherwise only grow: a dead
        letter per message an endpoint never took, a state per URL any tenant ever named."""

    @abstractmethod
    async def schedule(self, retry: ScheduledRetry) -> None:
        """Keep ``retry`` until it is due (replacing one of the same id)."""

    @abstractmethod
    async def take_due(self, now: float, *, limit: int, hold_s: float) -> list[ScheduledRetry]:
        """Up to ``limit`` retries due by ``now``, earliest first, each held for its taker for
        ``hold_s`` (due again after that, should the taker go away before it reschedules or
        drops it); of several takers at once, each retry goes to one."""

    @abstractmethod
    async def unschedule(self, retry_id: str) -> None:
        """Drop a retry that reached a final outcome."""

    @abstractmethod
    async def scheduled(self) -> int:
        """How many retries wait (for metrics, and to know when all is settled)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def _iso(at: datetime) -> str:
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
