"""Dead letters of a deployment, for operators and tenants: list and replay.

Two kinds live in two places:

- ``event``: an upload event the consumer could not accept, in the Kafka dead-letter topic with
  Spring-style headers (``consumers.dead_letter``). Id ``event:{partition}:{offset}`` (its
  position in the dead-letter topic). Replay publishes the original key, value and headers to
  the uploads topic again, for when the producer or the service has been fixed.
- ``webhook``: a message a target never accepted, in the delivery log (``notify``). Id
  ``webhook:{webhook_id}:{target digest}``. Replay is one more signed delivery with the same
  ``webhook-id`` (``notify.replay``).

Tenants: an event belongs to the tenant its body names (``default`` when it names none, as for
a valid event); a body that cannot be read names no tenant and only an unscoped caller (no
authentication) sees it. A webhook belongs to its event's tenant.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from api.models import DeadLetterEntry, ReplayResult
from consumers.admin import broker_error
from consumers.dead_letter import DeadLetterHeaders
from consumers.events import VIDEO_ID_PATTERN
from consumers.publishing import publish_once
from core.config import KafkaSettings, ServiceConfig
from notify import base as notify_base
from notify.base import DeliveryLog, Outcome
from notify.delivery_log import RedisDeliveryLog
from notify.replay import WebhookReplayer
from notify.webhooks import WebhookSender

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_DEAD_LETTER_HEADER = re.compile(r"^(kafka_dlt-|reelsense-)")
REPLAYED_FROM = "reelsense-replayed-from"
_READ_TIMEOUT_S = 10.0
# A scan of the dead letters: when, how many per partition, the event and webhook letters.
_Scan = tuple[float, int, list[DeadLetterEntry], list[notify_base.DeadLetter]]
_NOTHING_SCANNED: _Scan = (-math.inf, 0, [], [])


class DeadLetterSource:
    """Lists and replays the dead letters of one deployment."""

    def __init__(
        self,
        kafka: KafkaSettings,
        delivery_log: DeliveryLog | None,
        replayer: WebhookReplayer | None = None,
        *,
        scan_limit: int = 1000,
        cache_s: float = 2.0,
    ) -> None:
        self._kafka = kafka
        self._log = delivery_log
        self._replayer = replayer
        self._scan_limit = scan_limit
        self._cache_s = cache_s
        # (when, letters per partition scanned, event letters, webhook letters): callers within
        # cache_s of a scan share it, and one scan runs at a time.
        self._cache: _Scan = _NOTHING_SCANNED
        self._scanning = asyncio.Lock()

    @classmethod
    def from_config(cls, config: ServiceConfig) -> DeadLetterSource:
        """Kafka from ``config.kafka``, the delivery log in ``config.redis``, and a webhook
        sender signing with ``config.notify``'s secrets for replays."""
        delivery_log = RedisDeliveryLog.from_settings(config.redis, config.notify)
        replayer = WebhookReplayer(delivery_log, WebhookSender(config.notify), config.notify)
        return cls(config.kafka, delivery_log, replayer)

    async def close(self) -> None:
        if self._replayer is not None:
            await self._replayer.close()
        if self._log is not None:
            await self._log.close()

    # -- listing ----------------------------------------------------------------------------

    async def newest(self, tenant: str | None, limit: int) -> list[DeadLetterEntry]:
        """The newest ``limit`` dead letters ``tenant`` may see (all of them for None), from
        the newest ``scan_limit`` of each partition and of the delivery log. A scan is shared
        by the callers of the next ``cache_s`` seconds; a replay starts a new one."""
        events, letters = await self._scan(max(limit, self._scan_limit))
        hooks = [_webhook_letter(d, tenant) for d in letters]
        visible = [d for d in (*events, *hooks) if tenant is None or d.tenant == tenant]
        oldest = datetime.min.replace(tzinfo=UTC)
        return sorted(visible, key=lambda d: d.at or oldest, reverse=True)[:limit]

    async def _scan(
        self, per_partition: int
    ) -> tuple[list[DeadLetterEntry], list[notify_base.DeadLetter]]:
        async with self._scanning:
            at, scanned, events, letters = self._cache
            if scanned >= per_partition and time.monotonic() - at < self._cache_s:
                return events, letters
            events = [self._event_letter(r) for r in await self._newest_records(per_partition)]
            letters = await self._webhook_letters(per_partition)
            self._cache = (time.monotonic(), per_partition, events, letters)
            return events, letters

    async def _webhook_letters(self, limit: int) -> list[notify_base.DeadLetter]:
        return [] if self._log is None else await self._log.dead_letters(limit)

    def _event_letter(self, record: ConsumerRecord[bytes, bytes]) -> DeadLetterEntry:
        headers = list(record.headers)
        try:
            spring: DeadLetterHeaders | None = DeadLetterHeaders.from_headers(headers)
        except (KeyError, ValueError, TypeError):  # a record someone else put there
            spring = None
        body = _json_object(record.value)
        data: dict[str, Any] = {
            "dead_letter_topic": record.topic,
            "key": None if record.key is None else record.key.decode("utf-8", "replace"),
            "size_bytes": len(record.value or b""),
        }
        if spring is not None:
            data |= {
                "original_topic": spring.original_topic,
                "original_partition": spring.original_partition,
                "original_offset": spring.original_offset,
                "exception": spring.exception_fqcn,
                "consumer_group": spring.consumer_group,
                "value_dropped": spring.value_dropped,
            }
        return DeadLetterEntry(
            id=f"event:{record.partition}:{record.offset}",
            kind="event",
            video_id=_video_id(record.key, body),
            tenant=_event_tenant(body),
            code=spring.reason_code if spring else "unknown",
            message=spring.exception_message if spring else "",
            at=datetime.fromtimestamp(record.timestamp / 1000, UTC),
            data=data,
        )

    async def _newest_records(self, per_partition: int) -> list[ConsumerRecord[bytes, bytes]]:
        """The newest records of every partition of the dead-letter topic."""
        async with self._consumer() as consumer:
            topic = self._kafka.dead_letter_topic
            partitions = [
                TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()
            ]
            if not partitions:
                return []
            ends = await consumer.end_offsets(partitions)
            starts = await consumer.beginning_offsets(partitions)
            consumer.assign(partitions)
            wanted = {}
            for tp in partitions:
                first = max(starts[tp], ends[tp] - per_partition)
                if first < ends[tp]:
                    consumer.seek(tp, first)
                    wanted[tp] = ends[tp]
            return await _read_until(consumer, wanted, to_highwater=True)

    async def _record_at(self, partition: int, offset: int) -> ConsumerRecord[bytes, bytes] | None:
        async with self._consumer() as consumer:
            tp = TopicPartition(self._kafka.dead_letter_topic, partition)
            if partition not in (consumer.partitions_for_topic(tp.topic) or ()):
                return None
            # Only the start is asked: the read stops at the high watermark a fetch reports,
            # which Tansu's ListOffsets can understate.
            if offset < (await consumer.beginning_offsets([tp]))[tp]:
                return None
            consumer.assign([tp])
            consumer.seek(tp, offset)
            found = await _read_until(consumer, {tp: offset + 1})
            return next((r for r in found if r.offset == offset), None)

    def _consumer(self) -> _Connected:
        return _Connected(self._kafka)

    # -- replay -----------------------------------------------------------------------------

    async def replay(self, letter_id: str, tenant: str | None) -> ReplayResult | None:
        """Replay one dead letter ``tenant`` may see; None when there is no such letter."""
        kind, _, rest = letter_id.partition(":")
        try:
            if kind == "event":
                return await self._replay_event(letter_id, rest, tenant)
            if kind == "webhook":
                return await self._replay_webhook(letter_id, tenant)
            return None
        finally:
            self._cache = _NOTHING_SCANNED  # the next listing shows what the replay changed

    async def _replay_event(
        self, letter_id: str, rest: str, tenant: str | None
    ) -> ReplayResult | None:
        partition, _, offset = rest.partition(":")
        if not (partition.isdigit() and offset.isdigit()):
            return None
        record = await self._record_at(int(partition), int(offset))
        if record is None:
            return None
        letter = self._event_letter(record)
        if tenant is not None and letter.tenant != tenant:
            return None
        if record.value is None:
            return ReplayResult(
                id=letter_id,
                kind="event",
                outcome="refused",
                code="dead_letter_without_value",
                detail="the broker did not keep the original value",
            )
        headers = [(k, v) for k, v in record.headers if not _DEAD_LETTER_HEADER.match(k)]
        position = f"{record.topic}/{record.partition}/{record.offset}"
        headers.append((REPLAYED_FROM, position.encode()))
        where = await self._publish(record.key, record.value, headers)
        return ReplayResult(id=letter_id, kind="event", outcome="published", detail=where)

    async def _publish(
        self, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]
    ) -> str:
        return await publish_once(self._kafka, value, key=key, headers=headers, what="replay")

    async def _replay_webhook(self, letter_id: str, tenant: str | None) -> ReplayResult | None:
        if self._log is None or self._replayer is None:
            return None
        found = [
            d
            for d in await self._log.dead_letters(self._scan_limit)
            if webhook_letter_id(d) == letter_id
        ]
        if not found or (tenant is not None and found[0].event.tenant != tenant):
            return None
        attempt = await self._replayer.replay(found[0])
        return ReplayResult(
            id=letter_id,
            kind="webhook",
            outcome=attempt.outcome.value,
            code=None if attempt.outcome is Outcome.DELIVERED else attempt.code,
            detail=attempt.detail,
        )


def webhook_letter_id(letter: notify_base.DeadLetter) -> str:
    """Stable per (message, target); the target itself stays out of the id."""
    digest = hashlib.sha256(letter.target.encode()).hexdigest()[:12]
    return f"webhook:{letter.webhook_id}:{digest}"


def _webhook_letter(letter: notify_base.DeadLetter, tenant: str | None) -> DeadLetterEntry:
    event = letter.event
    data: dict[str, Any] = {
        "webhook_id": letter.webhook_id,
        "type": event.type,
        "outcome": letter.outcome.value,
        "attempts": letter.attempts,
    }
    # A shared subscription's URL is the operator's business, a callback URL the tenant's own.
    if tenant is None or (event.callback_url and letter.target in event.callback_url):
        data["target"] = letter.target
    return DeadLetterEntry(
        id=webhook_letter_id(letter),
        kind="webhook",
        video_id=event.video_id,
        tenant=event.tenant,
        code=letter.code or letter.outcome.value,
        message=letter.detail,
        at=letter.at,
        data=data,
    )


class _Connected:
    """A consumer outside any group (it commits nothing), started and stopped around a read."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap,
            client_id=f"{settings.client_id}-dead-letters-reader",
            enable_auto_commit=False,
            request_timeout_ms=settings.request_timeout_ms,
        )
        self._doing = f"reading {settings.dead_letter_topic!r}"

    async def __aenter__(self) -> AIOKafkaConsumer:
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                await self._consumer.start()
        except (KafkaError, OSError, TimeoutError) as exc:
            await self._consumer.stop()
            raise broker_error(exc, self._doing) from exc
        # Let the consumer's background task begin: aiokafka's stop() awaits it after
        # cancelling, and a task cancelled before it ever ran raises CancelledError there.
        await asyncio.sleep(0)
        return self._consumer

    async def __aexit__(self, *exc_info: object) -> None:
        await self._consumer.stop()


async def _read_until(
    consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int], *, to_highwater: bool = False
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records from each partition's position up to (not including) its end offset, or its
    high watermark where that comes first (nothing lies beyond it).

    With ``to_highwater`` the end also grows to the high watermark that fetches report: Tansu
    answers ListOffsets with the last batch's base offset + 1, so a batch of several records
    at the end of a partition would otherwise be cut short (Apache Kafka's answers agree)."""
    found: list[ConsumerRecord[bytes, bytes]] = []
    remaining = dict(ends)
    try:
        async with asyncio.timeout(_READ_TIMEOUT_S):
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=500)
                for tp in list(remaining):
                    highwater = consumer.highwater(tp)
                    if to_highwater and highwater is not None:
                        remaining[tp] = max(remaining[tp], highwater)
                    found += [r for r in batch.get(tp, ()) if r.offset < remaining[tp]]
                    position = await consumer.position(tp)
                    last = remaining[tp] if highwater is None else min(remaining[tp], highwater)
                    if position >= last:
                        del remaining[tp]
    except (KafkaError, OSError) as exc:
        raise broker_error(exc, "reading dead letters") from exc
    except TimeoutError as exc:
        raise broker_error(exc, "reading dead letters (timed out)") from exc
    return found


def _json_object(value: bytes | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        body = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def _event_tenant(body: dict[str, Any] | None) -> str | None:
    if body is None:
        return None
    tenant = body.get("tenant", "default")
    return tenant if isinstance(tenant, str) and _TENANT.fullmatch(tenant) else None


def _video_id(key: bytes | None, body: dict[str, Any] | None) -> str | None:
    """The id the consumer gave the video a failed status under: the body's (read with
    surrounding whitespace stripped, as event fields are), else the key's."""
    body_id = None if body is None else body.get("video_id")
    if isinstance(body_id, str) and VIDEO_ID_PATTERN.fullmatch(body_id.strip()):
        return body_id.strip()
    key_id = None if key is None else key.decode("utf-8", "replace")
    return key_id if key_id is not None and VIDEO_ID_PATTERN.fullmatch(key_id) else None
