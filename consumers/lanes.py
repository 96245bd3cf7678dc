"""Priority lanes: fresh uploads first, bulk work (backfills, reprocessing) in the room left.

The consumer reads two topics in one group: ``KafkaSettings.topic`` (the fresh lane) and
``KafkaSettings.bulk_topic`` (the bulk lane). Fresh records have ``max_in_flight`` slots of
their own, whatever bulk work runs. Bulk records start only

- while fewer than ``max_in_flight`` records of both lanes are in flight: bulk work uses the
  room fresh uploads leave, never more;
- up to ``bulk_share`` of ``max_in_flight`` (rounded down, at least one);
- while no fresh record waits: a fresh record fetched without a free slot (sought back, to be
  fetched again) closes the bulk lane until one is taken with a slot to spare.

A fresh upload that comes while bulk work fills the machine starts at once; the bulk videos
then pause between chunks on the replicas it is ingested on (``runtime.pools.ingest
.FreshFirst``) and give it their decode slots (``runtime.chunk_stages.DecodeSlots``).

The bulk partitions are paused while their lane is closed and resumed when it opens again:
pausing is local to the consumer, so the group does not rebalance, and the bulk records stay
in the topic (their offsets are not committed past what was done). A running bulk video is
never stopped for a fresh one; it keeps its slot until it is done.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from aiokafka.structs import TopicPartition

from core.config import KafkaSettings

Lane = Literal["fresh", "bulk"]
FRESH: Lane = "fresh"  # core.records.FRESH_LANE
BULK: Lane = "bulk"  # core.records.BULK_LANE


class Lanes:
    """Decides, before each poll, which lanes may take records, and how many."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.fresh_topic = settings.topic
        self.bulk_topic = settings.bulk_topic
        self.max_in_flight = settings.max_in_flight
        self.bulk_slots = max(1, int(settings.bulk_share * settings.max_in_flight))
        self.fresh_waiting = False  # a fresh record was left for want of a slot

    @property
    def topics(self) -> list[str]:
        return [self.fresh_topic, *([self.bulk_topic] if self.bulk_topic else [])]

    def lane_of(self, topic: str) -> Lane:
        return BULK if self.bulk_topic is not None and topic == self.bulk_topic else FRESH

    def fresh_slots(self, in_flight: Mapping[Lane, int]) -> int:
        """Fresh records that may start now."""
        return max(0, self.max_in_flight - in_flight.get(FRESH, 0))

    def bulk_room(self, in_flight: Mapping[Lane, int]) -> int:
        """Bulk records that may start now."""
        if self.bulk_topic is None or self.fresh_waiting:
            return 0
        free = self.max_in_flight - sum(in_flight.values())
        return max(0, min(free, self.bulk_slots - in_flight.get(BULK, 0)))

    def admit(
        self, batch: Mapping[TopicPartition, Sequence[Any]], in_flight: Mapping[Lane, int]
    ) -> Iterator[tuple[TopicPartition, Any, bool]]:
        """Each record of a poll with whether it may start now, fresh lanes first; the first
        refused record of a partition ends that partition (the caller seeks back to it).
        Notes whether a fresh record was refused: the bulk lane stays closed until one is
        taken again with a slot to spare."""
        counts = {FRESH: in_flight.get(FRESH, 0), BULK: in_flight.get(BULK, 0)}
        refused_fresh = False
        for tp in sorted(batch, key=lambda tp: self.lane_of(tp.topic) == BULK):
            lane = self.lane_of(tp.topic)
            for record in batch[tp]:
                if lane == FRESH:
                    ok = self.fresh_slots(counts) > 0
                    refused_fresh = refused_fresh or not ok
                else:
                    ok = self.bulk_room(counts) > 0 and not refused_fresh
                yield tp, record, ok
                if not ok:
                    break
                counts[lane] += 1
        self.fresh_waiting = refused_fresh

    def in_flight(self, tasks: Iterable[tuple[TopicPartition, int]]) -> dict[Lane, int]:
        """Records in flight per lane, from (partition, records in flight there)."""
        counts: dict[Lane, int] = {FRESH: 0, BULK: 0}
        for tp, count in tasks:
            counts[self.lane_of(tp.topic)] += count
        return counts
