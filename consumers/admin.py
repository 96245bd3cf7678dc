"""Topic setup, and the one place where Kafka client exceptions become reelsense errors."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    TopicAlreadyExistsError,
    for_code,
)

from consumers.errors import BrokerUnavailable
from core.config import KafkaSettings
from core.errors import PermanentError, ReelsenseError

log = logging.getLogger(__name__)


def broker_error(exc: BaseException, doing: str) -> ReelsenseError:
    """Map an aiokafka (or socket) exception to ``BrokerUnavailable`` when retrying may help,
    else to a ``PermanentError`` whose code names the broker's reason (``kafka_...``)."""
    if isinstance(exc, ReelsenseError):
        return exc
    text = str(exc)
    if type(exc).__name__ not in text:  # aiokafka's errors already name themselves
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    message = f"{doing}: {text}"
    if isinstance(exc, KafkaError) and not exc.retriable and not _is_connection(exc):
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__.removesuffix("Error")).lower()
        return PermanentError(message, code=f"kafka_{name}")
    return BrokerUnavailable(message)


def _is_connection(exc: KafkaError) -> bool:
    # aiokafka marks these non-retriable, yet a broker that comes back fixes them.
    return isinstance(exc, KafkaConnectionError | KafkaTimeoutError | NoBrokersAvailable)


def service_topics(settings: KafkaSettings) -> dict[str, int]:
    """The topics the service uses, each with the partitions it is created with."""
    topics = {
        settings.topic: settings.topic_partitions,
        settings.dead_letter_topic: settings.dead_letter_topic_partitions,
        settings.status_topic: settings.status_topic_partitions,
    }
    if settings.bulk_topic is not None:
        topics[settings.bulk_topic] = settings.bulk_topic_partitions
    return topics


def _new_topic(name: str, partitions: int, replication_factor: int) -> NewTopic:
    # aiokafka's NewTopic takes -1 (the broker's default, KIP-464) only beside a replica
    # assignment; an empty one puts no assignment on the wire and leaves the choice to the
    # broker, as a Java client does.
    defaulted = -1 in (partitions, replication_factor)
    return NewTopic(name, partitions, replication_factor, {} if defaulted else None)


async def ensure_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    *,
    replication_factor: int = -1,
    timeout_s: float = 30.0,
) -> None:
    """Create the topics in ``topics`` (name -> partitions) that do not exist yet.

    Partitions or ``replication_factor`` -1 take the broker's defaults (``num.partitions``,
    ``default.replication.factor``). Existing topics are left as they are, whatever their
    partition count. Raises ``BrokerUnavailable`` when the broker cannot be reached or does
    not answer in ``timeout_s``, and ``PermanentError`` when it refuses a topic (bad name, a
    replication factor above the brokers there are).
    """
    if not topics:
        return
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="reelsense-admin",
        request_timeout_ms=int(timeout_s * 1000),
    )
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            response = await admin.create_topics(
                [
                    _new_topic(name, partitions, replication_factor)
                    for name, partitions in topics.items()
                ]
            )
    except (KafkaError, OSError, TimeoutError) as exc:
        raise broker_error(exc, f"creating topics {sorted(topics)}") from exc
    finally:
        await admin.close()
    # The admin client reports per-topic errors in the response instead of raising.
    for topic_error in response.topic_errors:
        name, code = topic_error[0], topic_error[1]
        message = topic_error[2] if len(topic_error) > 2 else None
        if code == 0:
            log.info(
                "created topic %s: partitions %s, replication %s",
                name,
                topics[name] if topics[name] > 0 else "the broker's default",
                replication_factor if replication_factor > 0 else "the broker's default",
            )
            continue
        error = for_code(code)
        if error is TopicAlreadyExistsError:
            continue
        raise broker_error(error(message or ""), f"creating topic {name!r}")
