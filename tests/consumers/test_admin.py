from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    KafkaConnectionError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    TopicAuthorizationFailedError,
)

from consumers.admin import broker_error, ensure_topics, service_topics
from consumers.errors import BrokerUnavailable
from core.config import KafkaSettings
from core.errors import PermanentError
from devkit.services import free_port


async def replicas_per_partition(bootstrap: str, topics: list[str]) -> dict[str, list[int]]:
    """Topic -> the replica count of each of its partitions, as the broker's metadata says."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    assert all(topic["error_code"] == 0 for topic in described), described
    return {
        topic["topic"]: [len(p["replicas"]) for p in sorted(topic["partitions"], key=_index)]
        for topic in described
    }


def _index(partition: dict[str, int]) -> int:
    return partition["partition"]


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


async def test_the_service_topics_are_created_as_the_settings_say(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = KafkaSettings(
        bootstrap=kafka_bootstrap,
        topic=f"up-{unique}",
        dead_letter_topic=f"up-{unique}.dlq",
        status_topic=f"st-{unique}",
        bulk_topic=f"up-{unique}.bulk",
        topic_partitions=6,
        dead_letter_topic_partitions=2,
        status_topic_partitions=4,
        bulk_topic_partitions=5,
        replication_factor=1,
    )
    topics = service_topics(settings)
    assert topics == {
        f"up-{unique}": 6,
        f"up-{unique}.dlq": 2,
        f"st-{unique}": 4,
        f"up-{unique}.bulk": 5,
    }
    assert f"up-{unique}.bulk" not in service_topics(
        settings.model_copy(update={"bulk_topic": None})
    )
    await ensure_topics(kafka_bootstrap, topics, replication_factor=settings.replication_factor)
    found = await replicas_per_partition(kafka_bootstrap, list(topics))
    assert found == {
        f"up-{unique}": [1] * 6,
        f"up-{unique}.dlq": [1] * 2,
        f"st-{unique}": [1] * 4,
        f"up-{unique}.bulk": [1] * 5,
    }


async def test_minus_one_takes_the_brokers_defaults(kafka_bootstrap: str, unique: str) -> None:
    """The defaults (replication -1) and partitions -1 are sent as they are (KIP-464): the
    broker picks, and the topic is there with at least one partition and one replica each."""
    assert KafkaSettings().replication_factor == -1
    await ensure_topics(kafka_bootstrap, {f"d-{unique}": 5, f"e-{unique}": -1})
    found = await replicas_per_partition(kafka_bootstrap, [f"d-{unique}", f"e-{unique}"])
    assert len(found[f"d-{unique}"]) == 5
    assert len(found[f"e-{unique}"]) >= 1
    assert all(count >= 1 for counts in found.values() for count in counts)


@pytest.mark.parametrize(
    "field",
    [
        "topic_partitions",
        "status_topic_partitions",
        "bulk_topic_partitions",
        "dead_letter_topic_partitions",
        "replication_factor",
    ],
)
@pytest.mark.parametrize("value", [0, -2])
def test_a_count_must_be_positive_or_the_brokers_default(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        KafkaSettings(**{field: value})  # type: ignore[arg-type]
