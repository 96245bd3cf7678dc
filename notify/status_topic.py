"""The status topic: each final video event as one Kafka record, for stream consumers.

The record value is the same JSON payload the webhooks carry (``{"type", "timestamp",
"data"}``), the key is the video id (so one video's events stay in order on one partition)
and the ``webhook-id`` header carries the deterministic message id for deduplication.

The producer is a plain one: Tansu, the embedded broker, refuses idempotent producers.
Delivery is at-least-once; a republished event carries the same ``webhook-id``. An event the
broker will never take (``StatusPublishRefused``) is dead-lettered by the dispatcher.
"""

from __future__ import annotations

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from checkpoint.base import OutboxEvent
from core.config import KafkaSettings
from notify.base import StatusPublisher, WebhookMessage
from notify.errors import StatusPublishFailed, StatusPublishRefused


class StatusTopicPublisher(StatusPublisher):
    """Publishes outbox events to ``KafkaSettings.status_topic``; starts on first use."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        client_id: str = "reelsense-notify",
        request_timeout_ms: int = 10_000,
    ) -> None:
        self._settings = settings
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._producer: AIOKafkaProducer | None = None

    @property
    def topic(self) -> str:
        return self._settings.status_topic

    async def start(self) -> None:
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.bootstrap,
            client_id=self._client_id,
            enable_idempotence=False,
            acks="all",
            request_timeout_ms=self._request_timeout_ms,
        )
        try:
            await producer.start()
        except (KafkaError, OSError) as exc:
            # A producer that failed to start cannot be started again: drop it.
            await producer.stop()
            raise StatusPublishFailed(f"status topic producer did not start: {exc!r}") from None
        self._producer = producer

    async def publish(self, event: OutboxEvent) -> None:
        await self.start()
        assert self._producer is not None
        message = WebhookMessage.from_event(event)
        try:
            await self._producer.send_and_wait(
                self.topic,
                value=message.body,
                key=event.video_id.encode(),
                headers=[
                    ("webhook-id", message.id.encode()),
                    ("event-type", event.type.encode()),
                ],
            )
        except KafkaError as exc:
            if not exc.retriable:  # too large, topic or authorization refused: for ever
                raise StatusPublishRefused(f"{self.topic} refused the event: {exc!r}") from None
            raise StatusPublishFailed(f"publish to {self.topic} failed: {exc!r}") from None
        except OSError as exc:
            raise StatusPublishFailed(f"publish to {self.topic} failed: {exc!r}") from None

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
