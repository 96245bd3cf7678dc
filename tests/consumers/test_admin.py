from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import (
    KafkaConnectionError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    TopicAuthorizationFailedError,
)

from consumers.admin import broker_error, ensure_topics
from consumers.errors import BrokerUnavailable
from core.errors import PermanentError
from devkit.services import free_port


async def test_ensure_topics_creates_them_and_tolerates_existing_ones(
    kafka_bootstrap: str, unique: str
) -> None:
    topics = {f"a-{unique}": 3, f"b-{unique}": 1}
    await ensure_topics(kafka_bootstrap, topics)
    await ensure_topics(kafka_bootstrap, topics)  # again: already there, no error
    await ensure_topics(kafka_bootstrap, {f"a-{unique}": 5, f"c-{unique}": 2})

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        found = await consumer.topics()
        assert {f"a-{unique}", f"b-{unique}", f"c-{unique}"} <= found
        assert consumer.partitions_for_topic(f"a-{unique}") == {0, 1, 2}  # left as it was
        assert consumer.partitions_for_topic(f"c-{unique}") == {0, 1}
    finally:
        await consumer.stop()


async def test_ensure_topics_with_the_broker_down_is_broker_unavailable() -> None:
    with pytest.raises(BrokerUnavailable) as caught:
        await ensure_topics(f"127.0.0.1:{free_port()}", {"x": 1}, timeout_s=5)
    assert caught.value.code == "broker_unavailable"


def test_broker_errors_map_to_retryable_or_permanent() -> None:
    assert isinstance(broker_error(KafkaConnectionError("down"), "x"), BrokerUnavailable)
    assert isinstance(broker_error(NotLeaderForPartitionError(), "x"), BrokerUnavailable)
    assert isinstance(broker_error(TimeoutError(), "x"), BrokerUnavailable)
    refused = broker_error(TopicAuthorizationFailedError(), "publishing")
    assert isinstance(refused, PermanentError)
    assert refused.code == "kafka_topic_authorization_failed"
    assert broker_error(MessageSizeTooLargeError(), "x").code == "kafka_message_size_too_large"
    assert "publishing" in str(refused)
