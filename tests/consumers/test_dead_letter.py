from __future__ import annotations

from typing import Any

import pytest

from consumers.admin import ensure_topics
from consumers.base import RecordInfo
from consumers.dead_letter import DeadLetterHeaders, DeadLetterPublisher
from consumers.errors import BrokerUnavailable, InvalidEvent
from devkit.services import free_port
from devkit.workload import read_records
from tests.consumers import kafka_settings


async def test_published_record_keeps_its_bytes_and_says_where_and_why(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique)
    await ensure_topics(kafka_bootstrap, {settings.dead_letter_topic: 1})
    record = RecordInfo(
        topic=settings.topic,
        partition=2,
        offset=41,
        key=b"\xffraw-key",
        timestamp=1_700_000_000_123,
    )
    error = InvalidEvent("event is not JSON: ✗", code="event_not_json", video_id=None)
    async with DeadLetterPublisher(settings) as publisher:
        await publisher.publish(
            record, b"\x00not json\xfe", error, original_headers=[("trace", b"abc")]
        )

    [found] = await read_records(kafka_bootstrap, settings.dead_letter_topic, 1)
    published: Any = found
    assert published.key == b"\xffraw-key"
    assert published.value == b"\x00not json\xfe"
    headers = dict(published.headers)
    assert headers["trace"] == b"abc"
    assert headers["kafka_dlt-original-partition"] == b"\x00\x00\x00\x02"  # Spring: 4-byte int
    letter = DeadLetterHeaders.from_headers(published.headers)
    assert letter.original_topic == settings.topic
    assert (letter.original_partition, letter.original_offset) == (2, 41)
    assert letter.original_timestamp == 1_700_000_000_123
    assert letter.exception_fqcn == "consumers.errors.InvalidEvent"
    assert letter.exception_message == "event is not JSON: ✗"
    assert letter.reason_code == "event_not_json"
    assert letter.consumer_group == settings.group_id
    assert letter.value_dropped is None


async def test_publisher_with_the_broker_down_is_broker_unavailable(unique: str) -> None:
    settings = kafka_settings(f"127.0.0.1:{free_port()}", unique, request_timeout_ms=2000)
    publisher = DeadLetterPublisher(settings)
    with pytest.raises(BrokerUnavailable):
        await publisher.start()
    record = RecordInfo(topic="t", partition=0, offset=0, key=None, timestamp=0)
    with pytest.raises(BrokerUnavailable):
        await publisher.publish(record, b"x", ValueError("boom"))
    await publisher.stop()
