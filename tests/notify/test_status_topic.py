"""The status topic on the real broker (Tansu)."""

from __future__ import annotations

import json

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from core.config import KafkaSettings
from devkit.services import free_port
from devkit.workload import read_records
from notify.errors import StatusPublishFailed, StatusPublishRefused
from notify.status_topic import StatusTopicPublisher
from tests.notify.support import make_event


async def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def new_status_topic(bootstrap: str, unique: str) -> tuple[str, StatusTopicPublisher]:
    """A fresh status topic on the broker, and a publisher to it."""
    topic = f"status-{unique}"
    await create_topic(bootstrap, topic)
    return topic, StatusTopicPublisher(KafkaSettings(bootstrap=bootstrap, status_topic=topic))


async def test_events_are_readable_from_the_status_topic(kafka_bootstrap: str, unique: str) -> None:
    topic, publisher = await new_status_topic(kafka_bootstrap, unique)
    events = [
        make_event("v1"),
        make_event("v2", type="video.failed", data={"error_code": "invalid_video"}),
    ]
    try:
        for event in events:
            await publisher.publish(event)
        await publisher.publish(events[0])  # a republish: same id, receivers deduplicate
    finally:
        await publisher.stop()

    records = await read_records(kafka_bootstrap, topic, 3)
    assert len(records) == 3
    seen = []
    for record in records:
        headers = {k: v.decode() for k, v in record.headers}
        payload = json.loads(record.value)
        seen.append((record.key.decode(), headers["webhook-id"], payload["type"]))
        assert headers["event-type"] == payload["type"]
        assert payload["data"]["video_id"] == record.key.decode()
    assert seen == [
        ("v1", events[0].webhook_id, "video.done"),
        ("v2", events[1].webhook_id, "video.failed"),
        ("v1", events[0].webhook_id, "video.done"),
    ]
    assert json.loads(records[1].value)["data"]["error_code"] == "invalid_video"


async def test_broker_down_is_a_retryable_error() -> None:
    publisher = StatusTopicPublisher(
        KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", status_topic="nowhere"),
        request_timeout_ms=1000,
    )
    with pytest.raises(StatusPublishFailed) as caught:
        await publisher.publish(make_event())
    assert caught.value.code == "status_publish_failed"
    await publisher.stop()


async def test_an_event_the_broker_never_takes_is_refused(
    kafka_bootstrap: str, unique: str
) -> None:
    """Above the producer's 1 MiB request limit: no retry can help, so it is not retryable."""
    topic, publisher = await new_status_topic(kafka_bootstrap, unique)
    try:
        with pytest.raises(StatusPublishRefused) as caught:
            await publisher.publish(make_event(data={"blob": "x" * (2 * 1024 * 1024)}))
        assert caught.value.code == "status_publish_refused"
        await publisher.publish(make_event("vid-2"))  # the next event goes through
        [record] = await read_records(kafka_bootstrap, topic, 1)
        assert record.key == b"vid-2"
    finally:
        await publisher.stop()
