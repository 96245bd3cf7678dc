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

from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from core.config import KafkaSettings
from core.records import BULK_LANE, FRESH_LANE, Lane


class Lanes:
    """Decides, before each poll, which lanes may take records, and how many; pauses and
    resumes the bulk partitions to match."""

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
        return BULK_LANE if self.bulk_topic is not None and topic == self.bulk_topic else FRESH_LANE

    def fresh_slots(self, in_flight: Mapping[Lane, int]) -> int:
        """Fresh records that may start now."""
        return max(0, self.max_in_flight - in_flight.get(FRESH_LANE, 0))

    def bulk_room(self, in_flight: Mapping[Lane, int]) -> int:
        """Bulk records that may start now."""
        if self.bulk_topic is None or self.fresh_waiting:
            return 0
        free = self.max_in_flight - sum(in_flight.values())
        return max(0, min(free, self.bulk_slots - in_flight.get(BULK_LANE, 0)))

    def open(
        self, consumer: AIOKafkaConsumer, in_flight: Mapping[Lane, int]
    ) -> list[TopicPartition]:
        """Resume what may take records now: the fresh partitions while a slot is free, the
        bulk ones while their lane has room; pause the bulk ones otherwise (no rebalance).
        Returns the fresh partitions open."""
        assigned, paused = consumer.assignment(), consumer.paused()
        bulk = {tp for tp in assigned if self.lane_of(tp.topic) == BULK_LANE}
        opened: set[TopicPartition] = set()
        if self.fresh_slots(in_flight) > 0:
            opened = assigned if self.bulk_room(in_flight) > 0 else assigned - bulk
        if paused & opened:
            consumer.resume(*(paused & opened))
        if bulk - opened - paused:
            consumer.pause(*(bulk - opened - paused))
        return sorted(opened - bulk)

    def admit(
        self, batch: Mapping[TopicPartition, Sequence[Any]], in_flight: Mapping[Lane, int]
    ) -> Iterator[tuple[TopicPartition, Any, bool]]:
        """Each record of a poll with whether it may start now, fresh lanes first; the first
        refused record of a partition ends that partition (the caller seeks back to it).
        Notes whether a fresh record was refused: the bulk lane stays closed until one is
        taken again with a slot to spare."""
        counts = {lane: in_flight.get(lane, 0) for lane in (FRESH_LANE, BULK_LANE)}
        refused_fresh = False
        for tp in sorted(batch, key=lambda tp: self.lane_of(tp.topic) == BULK_LANE):
            lane = self.lane_of(tp.topic)
            for record in batch[tp]:
                if lane == FRESH_LANE:
                    ok = self.fresh_slots(counts) > 0
                    refused_fresh = refused_fresh or not ok
                else:
                    ok = self.bulk_room(counts) > 0 and not refused_fresh
                yield tp, record, ok
                if not ok:
                    break
                counts[lane] += 1
        self.fresh_waiting = refused_fresh

    def in_flight(self, tasks: Mapping[TopicPartition, Sized]) -> dict[Lane, int]:
        """Records in flight per lane, from the records in flight per partition."""
        counts: dict[Lane, int] = {FRESH_LANE: 0, BULK_LANE: 0}
        for tp, records in tasks.items():
            counts[self.lane_of(tp.topic)] += len(records)
        return counts
