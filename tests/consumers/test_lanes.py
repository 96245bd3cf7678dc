"""Priority lanes against the real (Tansu) broker: bulk records take the room fresh uploads
leave, never a fresh record's slot, and pausing the bulk lane costs no rebalance."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from consumers.admin import ensure_topics
from consumers.base import RecordInfo
from consumers.events import VideoUploaded
from core.config import KafkaSettings
from tests.consumers import (
    RecordingHandler,
    kafka_settings,
    produce_videos,
    wait_committed,
    wait_until,
)
from tests.consumers.test_kafka_consumer import running


@dataclass
class LaneHandler(RecordingHandler):
    """Every video held until released; notes the most bulk videos handled at once."""

    bulk_topic: str = ""
    bulk_active: int = 0
    most_bulk_active: int = 0

    def gate(self, video_ids: list[str]) -> None:
        for video_id in video_ids:
            self.hold[video_id] = asyncio.Event()

    def release(self, *video_ids: str) -> None:
        for video_id in video_ids:
            self.hold[video_id].set()

    async def handle(self, event: VideoUploaded, record: RecordInfo) -> None:
        bulk = record.topic == self.bulk_topic
        self.bulk_active += bulk
        self.most_bulk_active = max(self.most_bulk_active, self.bulk_active)
        try:
            await super().handle(event, record)
        finally:
            self.bulk_active -= bulk


async def lanes(bootstrap: str, unique: str, **overrides: object) -> tuple[KafkaSettings, str]:
    """Settings with a bulk topic, both topics created (two partitions each); the bulk topic."""
    bulk_topic = f"uploads-{unique}.bulk"
    settings = kafka_settings(bootstrap, unique, bulk_topic=bulk_topic, **overrides)
    await ensure_topics(
        bootstrap, {settings.topic: 2, bulk_topic: 2, settings.dead_letter_topic: 1}
    )
    return settings, bulk_topic


async def _started(handler: LaneHandler, count: int) -> list[str]:
    await wait_until(lambda: len(handler.started) >= count)
    return handler.started[:count]


def _is_bulk(video_id: str) -> bool:
    return video_id.startswith("bulk")


async def test_bulk_work_takes_the_room_fresh_uploads_leave(
    kafka_bootstrap: str, unique: str
) -> None:
    # Three slots; bulk work takes two at most, and only while fewer than three videos run.
    settings, bulk_topic = await lanes(kafka_bootstrap, unique, max_in_flight=3, bulk_share=0.67)
    bulk = [f"bulk-{i}" for i in range(6)]
    fresh = [f"fresh-{i}" for i in range(4)]
    handler = LaneHandler(bulk_topic=bulk_topic)
    handler.gate(bulk + fresh)
    await produce_videos(kafka_bootstrap, bulk_topic, bulk)

    async with running(settings, handler) as consumer:
        first = await _started(handler, 2)
        assert all(_is_bulk(v) for v in first)
        await asyncio.sleep(1.0)  # more bulk work waits: two is its share
        assert len(handler.started) == 2
        assert consumer.stats().in_flight_bulk == 2

        # Fresh uploads have three slots of their own, whatever bulk work runs.
        await produce_videos(kafka_bootstrap, settings.topic, fresh)
        assert not any(_is_bulk(v) for v in (await _started(handler, 5))[2:])
        # A bulk video ends: a fresh upload still waits (three run), so no bulk work starts.
        handler.release(first[0])
        await asyncio.sleep(1.0)
        assert len(handler.started) == 5
        # A fresh one ends: the fresh upload waiting takes its slot.
        handler.release(handler.started[2])
        assert not _is_bulk((await _started(handler, 6))[5])
        assert {v for v in handler.started if not _is_bulk(v)} == set(fresh)
        # The fresh lane is empty: bulk work takes the room again, two at most at once.
        handler.release(*fresh)
        await wait_until(lambda: len(handler.started) >= 7)
        handler.release(*bulk)
        await wait_until(lambda: len(handler.handled) == len(bulk) + len(fresh))
        committed, ends = await wait_committed(kafka_bootstrap, settings.group_id, bulk_topic, 2)
        stats = consumer.stats()

    assert sorted(handler.handled_ids) == sorted(bulk + fresh)  # each once
    assert handler.most_bulk_active == 2
    assert committed == ends
    assert stats.rebalances == 1  # the first assignment: pausing the bulk lane moved nothing
    assert stats.in_flight == stats.in_flight_bulk == 0


async def test_bulk_work_uses_every_slot_it_is_given_when_nothing_fresh_comes(
    kafka_bootstrap: str, unique: str
) -> None:
    settings, bulk_topic = await lanes(kafka_bootstrap, unique, max_in_flight=4, bulk_share=1.0)
    bulk = [f"bulk-{i}" for i in range(12)]
    handler = LaneHandler(bulk_topic=bulk_topic, delay_s=(0.05, 0.15))
    await produce_videos(kafka_bootstrap, bulk_topic, bulk)
    async with running(settings, handler):
        await wait_until(lambda: len(handler.handled) == len(bulk))
    assert sorted(handler.handled_ids) == sorted(bulk)
    assert handler.most_bulk_active == 4


async def test_without_a_bulk_topic_only_the_fresh_topic_is_read(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique)
    assert settings.bulk_topic is None
    await ensure_topics(kafka_bootstrap, {settings.topic: 1, settings.dead_letter_topic: 1})
    handler = RecordingHandler()
    await produce_videos(kafka_bootstrap, settings.topic, ["only"])
    async with running(settings, handler) as consumer:
        await wait_until(lambda: handler.handled_ids == ["only"])
        assert {tp.topic for tp in consumer.stats().assigned} == {settings.topic}
