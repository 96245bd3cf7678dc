"""What a consumer hands to the service: valid upload events, and the invalid ones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka.structs import TopicPartition

from consumers.errors import InvalidEvent
from consumers.events import VideoDeleted, VideoUploaded


@dataclass(frozen=True)
class RecordInfo:
    """Where an event came from: enough to log it, dead-letter it or find it again."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    timestamp: int  # milliseconds since the epoch, as the record carries it
    lane: str = "fresh"  # "fresh" or "bulk" (consumers.lanes)

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


class VideoHandler(Protocol):
    """The service side of a consumer. The record's offset is committed only after the call
    returns, so a call must return only once the video's effects are durable.

    Both methods may be called concurrently for different videos; a consumer never runs two
    calls for the same ``video_id`` at once. An exception means "not durable yet": the
    consumer retries the call with backoff and keeps the offset uncommitted meanwhile. A
    cancelled call (shutdown, partition revoked) will be delivered again later, possibly to
    another consumer.
    """

    async def handle(self, event: VideoUploaded, record: RecordInfo) -> None:
        """Process one upload until it is done, failed, or skipped (already done), durably.
        ``InvalidEvent`` refuses the event for good (its id is another tenant's video): it is
        not retried but rejected and dead-lettered like an event that did not parse."""
        ...

    async def delete(self, event: VideoDeleted, record: RecordInfo) -> None:
        """Remove the video and everything of it, durably (its record a tombstone first, so
        an attempt under way stops). Called without waiting for the video's other calls."""
        ...

    async def reject(self, error: InvalidEvent, record: RecordInfo) -> None:
        """Record an event that is not a valid upload. When ``error.video_id`` is set, the
        video gets a failed status with ``error.code`` as the reason. The consumer also
        publishes the record to the dead-letter topic."""
        ...


@dataclass
class ConsumerCounts:
    """The counters a consumer keeps as it goes; ``ConsumerStats`` carries a snapshot."""

    records_seen: int = 0
    records_invalid: int = 0
    records_done: int = 0
    dead_lettered: int = 0
    dead_letters_lost: int = 0
    handler_failures: int = 0
    pauses: int = 0
    commits: int = 0
    commit_failures: int = 0
    rebalances: int = 0


@dataclass(frozen=True)
class ConsumerStats:
    """A snapshot of one consumer's counters, for metrics."""

    records_seen: int  # records taken from the broker
    records_invalid: int  # of which were not valid upload events
    records_done: int  # records whose effects are durable (offset may move past them)
    dead_lettered: int  # invalid records published to the dead-letter topic
    dead_letters_lost: int  # invalid records the broker took in no form (even without value
    # and headers): logged as errors, their offsets moved on
    handler_failures: int  # handle/reject/dead-letter calls that raised and were retried
    in_flight: int  # records being handled now
    paused_partitions: int  # partitions paused because in_flight reached max_in_flight
    pauses: int  # times the consumer paused its partitions
    commits: int
    commit_failures: int
    rebalances: int
    assigned: frozenset[TopicPartition]
    committed: Mapping[TopicPartition, int] = field(default_factory=dict)  # by this member
    in_flight_bulk: int = 0  # of in_flight, records of the bulk lane (consumers.lanes)
