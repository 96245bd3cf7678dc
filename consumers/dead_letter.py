"""The dead-letter topic: invalid records, byte for byte, with where they came from and why.

Headers follow Spring Kafka's ``DeadLetterPublishingRecoverer`` so existing tooling can read
them: text headers are UTF-8; partition is a 4-byte and offset and timestamp are 8-byte
big-endian signed integers. ``reelsense-reason-code`` carries the stable reason code.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from consumers.admin import broker_error
from consumers.base import RecordInfo
from core.config import KafkaSettings
from core.errors import PermanentError, ReelsenseError

ORIGINAL_TOPIC = "kafka_dlt-original-topic"
ORIGINAL_PARTITION = "kafka_dlt-original-partition"
ORIGINAL_OFFSET = "kafka_dlt-original-offset"
ORIGINAL_TIMESTAMP = "kafka_dlt-original-timestamp"
ORIGINAL_TIMESTAMP_TYPE = "kafka_dlt-original-timestamp-type"
ORIGINAL_CONSUMER_GROUP = "kafka_dlt-original-consumer-group"
EXCEPTION_FQCN = "kafka_dlt-exception-fqcn"
EXCEPTION_MESSAGE = "kafka_dlt-exception-message"
REASON_CODE = "reelsense-reason-code"
VALUE_DROPPED = "reelsense-value-dropped"  # set when the broker refused the original value
# Set when the broker refused the original headers too: JSON ``[[name, bytes], ...]`` of them.
HEADERS_DROPPED = "reelsense-headers-dropped"
TOO_LARGE = "kafka_message_size_too_large"

_MESSAGE_LIMIT = 4096  # characters of the exception message kept in the header
_DROPPED_NAMES_LIMIT = 100  # dropped headers named in HEADERS_DROPPED (the count is all of them)
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}

Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True)
class DeadLetterHeaders:
    """The dead-letter headers of one record, decoded."""

    original_topic: str
    original_partition: int
    original_offset: int
    original_timestamp: int
    exception_fqcn: str
    exception_message: str
    reason_code: str
    consumer_group: str | None = None
    value_dropped: str | None = None
    headers_dropped: str | None = None  # JSON: how many original headers, their names and sizes

    @classmethod
    def from_headers(cls, headers: Headers) -> DeadLetterHeaders:
        """Decode the headers written by ``DeadLetterPublisher``; ``KeyError`` if one is
        missing."""
        found = dict(headers)

        def text(name: str) -> str:
            return found[name].decode("utf-8", "replace")

        def optional(name: str) -> str | None:
            return text(name) if name in found else None

        return cls(
            original_topic=text(ORIGINAL_TOPIC),
            original_partition=struct.unpack(">i", found[ORIGINAL_PARTITION])[0],
            original_offset=struct.unpack(">q", found[ORIGINAL_OFFSET])[0],
            original_timestamp=struct.unpack(">q", found[ORIGINAL_TIMESTAMP])[0],
            exception_fqcn=text(EXCEPTION_FQCN),
            exception_message=text(EXCEPTION_MESSAGE),
            reason_code=text(REASON_CODE),
            consumer_group=optional(ORIGINAL_CONSUMER_GROUP),
            value_dropped=optional(VALUE_DROPPED),
            headers_dropped=optional(HEADERS_DROPPED),
        )


def dead_letter_headers(
    record: RecordInfo, error: BaseException, *, group_id: str | None, timestamp_type: int = 0
) -> list[tuple[str, bytes]]:
    """The headers that say where ``record`` came from and why it was rejected."""
    code = error.code if isinstance(error, ReelsenseError) else "internal_error"
    kind = type(error)
    headers = [
        (ORIGINAL_TOPIC, record.topic.encode()),
        (ORIGINAL_PARTITION, struct.pack(">i", record.partition)),
        (ORIGINAL_OFFSET, struct.pack(">q", record.offset)),
        (ORIGINAL_TIMESTAMP, struct.pack(">q", record.timestamp)),
        (ORIGINAL_TIMESTAMP_TYPE, _TIMESTAMP_TYPES.get(timestamp_type, "NoTimestampType").encode()),
        (EXCEPTION_FQCN, f"{kind.__module__}.{kind.__qualname__}".encode()),
        (EXCEPTION_MESSAGE, str(error)[:_MESSAGE_LIMIT].encode("utf-8", "replace")),
        (REASON_CODE, code.encode()),
    ]
    if group_id:
        headers.append((ORIGINAL_CONSUMER_GROUP, group_id.encode()))
    return headers


class DeadLetterTooLarge(PermanentError):
    """The broker refused even the smallest form of a dead letter (its key alone is too
    large): retrying cannot help, and the record's offset must still move."""

    code = TOO_LARGE


def _smaller_forms(
    value: bytes | None, original: Headers, own: list[tuple[str, bytes]]
) -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    """What to publish, largest first: the record as it came; without its value; without its
    original headers too (their names and sizes kept), so a record whose headers alone pass
    the broker's limit still leaves its where and why."""
    forms: list[tuple[bytes | None, list[tuple[str, bytes]]]] = [(value, [*original, *own])]
    dropped = [(VALUE_DROPPED, TOO_LARGE.encode())]
    if value is not None:
        forms.append((None, [*original, *own, *dropped]))
    if original:
        sizes = [[name, len(data)] for name, data in original]
        summary = {"count": len(sizes), "headers": sizes[:_DROPPED_NAMES_LIMIT]}
        dropped.append((HEADERS_DROPPED, json.dumps(summary).encode()))
        forms.append((None, [*own, *dropped]))
    return forms


class DeadLetterPublisher:
    """Publishes rejected records to the dead-letter topic and waits for the broker's ack
    (``acks=all``), so the source offset may move only once the copy is durable.

    Not idempotent on the broker (the test broker refuses idempotent producers): a retried
    publish may leave the same record twice in the dead-letter topic; the original
    topic/partition/offset headers identify duplicates.
    """

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None

    @property
    def topic(self) -> str:
        return self._settings.dead_letter_topic

    async def start(self) -> None:
        """Connect to the broker. Raises ``BrokerUnavailable`` when it cannot be reached."""
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.bootstrap,
            client_id=f"{self._settings.client_id}-dead-letters",
            acks="all",
            enable_idempotence=False,
            request_timeout_ms=self._settings.request_timeout_ms,
            # An invalid record may be far larger than a valid event; the broker decides.
            max_request_size=self._settings.max_request_bytes,
            linger_ms=0,
        )
        try:
            async with asyncio.timeout(self._settings.request_timeout_ms / 1000):
                await producer.start()
        except (KafkaError, OSError, TimeoutError) as exc:
            await producer.stop()
            raise broker_error(exc, "starting the dead-letter producer") from exc
        self._producer = producer

    async def stop(self) -> None:
        """Flush and disconnect. Safe to call twice."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def publish(
        self,
        record: RecordInfo,
        value: bytes | None,
        error: BaseException,
        *,
        original_headers: Headers = (),
        timestamp_type: int = 0,
    ) -> None:
        """Publish ``record`` (its original key and ``value``) with the dead-letter headers
        after its ``original_headers``, and wait for the ack. Raises ``BrokerUnavailable`` or
        ``PermanentError``; nothing is known to be published then."""
        if self._producer is None:
            await self.start()
        own = dead_letter_headers(
            record, error, group_id=self._settings.group_id, timestamp_type=timestamp_type
        )
        refused: PermanentError | None = None
        for form_value, headers in _smaller_forms(value, original_headers, own):
            try:
                await self._send(record.key, form_value, headers)
            except PermanentError as exc:
                if exc.code != TOO_LARGE:
                    raise
                refused = exc  # the where and why are kept: try a smaller form
            else:
                return
        assert refused is not None
        raise DeadLetterTooLarge(f"{record}: {refused}") from refused

    async def _send(self, key: bytes | None, value: bytes | None, headers: Headers) -> None:
        assert self._producer is not None
        try:
            async with asyncio.timeout(self._settings.request_timeout_ms / 1000 + 5):
                await self._producer.send_and_wait(
                    self._settings.dead_letter_topic, value=value, key=key, headers=list(headers)
                )
        except (KafkaError, OSError, TimeoutError) as exc:
            raise broker_error(exc, f"publishing to {self.topic!r}") from exc

    async def __aenter__(self) -> DeadLetterPublisher:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
