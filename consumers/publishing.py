"""One record published to the upload topic on an operator's behalf: a dead letter replayed,
a deletion asked through the API. A producer of its own each time: such calls are rare."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from consumers.admin import broker_error
from consumers.events import VideoDeleted
from core.config import KafkaSettings


async def publish_once(
    settings: KafkaSettings,
    value: bytes,
    *,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes]] = (),
    what: str,
) -> str:
    """Publish one record to ``settings.topic`` and wait for the ack; where it went
    (``topic/partition/offset``). ``BrokerUnavailable`` or ``PermanentError`` otherwise."""
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap,
        client_id=f"{settings.client_id}-{what}",
        acks="all",
        enable_idempotence=False,
        request_timeout_ms=settings.request_timeout_ms,
    )
    try:
        async with asyncio.timeout(settings.request_timeout_ms / 1000 + 5):
            await producer.start()
            meta = await producer.send_and_wait(
                settings.topic, value, key=key, headers=list(headers)
            )
    except (KafkaError, OSError, TimeoutError) as exc:
        raise broker_error(exc, f"publishing ({what}) to {settings.topic!r}") from exc
    finally:
        await producer.stop()
    return f"{settings.topic}/{meta.partition}/{meta.offset}"


async def publish_deletion(
    settings: KafkaSettings, video_id: str, tenant: str, reason: str | None = None
) -> str:
    """A ``video.deleted`` event for the video, under its key: in order with its uploads."""
    event = VideoDeleted(type="video.deleted", video_id=video_id, tenant=tenant, reason=reason)
    return await publish_once(settings, event.to_bytes(), key=video_id.encode(), what="delete")
