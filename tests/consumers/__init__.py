"""Helpers shared by the consumer tests: a recording handler, producing and reading offsets."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from consumers.base import RecordInfo
from consumers.errors import InvalidEvent
from consumers.events import VideoDeleted, VideoUploaded
from core.config import KafkaSettings
from core.errors import RetryableError

# Group joins take about session_timeout/2 on Tansu; keep them short in tests.
FAST_GROUP = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}


def kafka_settings(bootstrap: str, unique: str, **overrides: object) -> KafkaSettings:
    values: dict[str, object] = {
        "bootstrap": bootstrap,
        "topic": f"uploads-{unique}",
        "dead_letter_topic": f"uploads-{unique}.dlq",
        "bulk_topic": None,  # one topic; tests/consumers/test_lanes.py names a bulk one
        "group_id": f"group-{unique}",
        "commit_interval_s": 0.2,
        "poll_timeout_ms": 100,
        "retry_initial_s": 0.05,
        "retry_max_s": 0.2,
        "shutdown_timeout_s": 5.0,
        "commit_timeout_s": 5.0,
        "request_timeout_ms": 10_000,
        **FAST_GROUP,
        **overrides,
    }
    return KafkaSettings(**values)  # type: ignore[arg-type]


def event_bytes(video_id: str) -> bytes:
    return VideoUploaded(video_id=video_id, uri=f"file:///videos/{video_id}.mp4").to_bytes()


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    *,
    partition: int | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> list[tuple[int, int]]:
    """Publish (key, value) records; returns their (partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        placed = []
        for key, value in records:
            meta = await producer.send_and_wait(
                topic, value=value, key=key, partition=partition, headers=list(headers)
            )
            placed.append((meta.partition, meta.offset))
        return placed
    finally:
        await producer.stop()


async def produce_videos(
    bootstrap: str, topic: str, video_ids: Iterable[str], *, partition: int | None = None
) -> list[tuple[int, int]]:
    return await produce(
        bootstrap, topic, [(v.encode(), event_bytes(v)) for v in video_ids], partition=partition
    )


async def group_offsets(
    bootstrap: str, group_id: str, topic: str, partitions: int
) -> tuple[dict[int, int | None], dict[int, int]]:
    """(committed, end) offsets per partition, as a fresh member of ``group_id`` sees them."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        committed = {tp.partition: await consumer.committed(tp) for tp in tps}
        ends = await consumer.end_offsets(tps)
        return committed, {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


Offsets = dict[int, int | None]


def _at_end(committed: Offsets, ends: dict[int, int]) -> bool:
    return all((committed[p] or 0) >= ends[p] for p in ends)


async def wait_committed(
    bootstrap: str,
    group_id: str,
    topic: str,
    partitions: int,
    *,
    until: Callable[[Offsets, dict[int, int]], bool] = _at_end,
    timeout_s: float = 30.0,
) -> tuple[Offsets, dict[int, int]]:
    """Poll the group's (committed, end) offsets until ``until`` holds (by default: all
    committed to the end) or ``timeout_s`` passes; returns the last look."""
    deadline = time.monotonic() + timeout_s
    while True:
        committed, ends = await group_offsets(bootstrap, group_id, topic, partitions)
        if until(committed, ends) or time.monotonic() > deadline:
            return committed, ends
        await asyncio.sleep(0.2)


@dataclass
class RecordingHandler:
    """A ``VideoHandler`` that records what it saw and can be slowed, held or made to fail."""

    delay_s: tuple[float, float] = (0.0, 0.0)  # random delay per video, uniform in range
    hold: dict[str, asyncio.Event] = field(default_factory=dict)  # video_id -> released when set
    fail: Counter[str] = field(default_factory=Counter)  # video_id -> failures left to raise
    reject_fails: int = 0  # reject() raises this many times first
    handled: list[tuple[str, RecordInfo]] = field(default_factory=list)
    rejected: list[tuple[InvalidEvent, RecordInfo]] = field(default_factory=list)
    deleted: list[tuple[str, RecordInfo]] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    active_videos: Counter[str] = field(default_factory=Counter)
    overlapped: list[str] = field(default_factory=list)  # same video handled twice at once
    calls: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    @property
    def handled_ids(self) -> list[str]:
        return [video_id for video_id, _ in self.handled]

    async def handle(self, event: VideoUploaded, record: RecordInfo) -> None:
        self.calls += 1
        self.started.append(event.video_id)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        if self.active_videos[event.video_id]:
            self.overlapped.append(event.video_id)
        self.active_videos[event.video_id] += 1
        try:
            gate = self.hold.get(event.video_id)
            if gate is not None:
                await gate.wait()
            low, high = self.delay_s
            if high:
                await asyncio.sleep(self.rng.uniform(low, high))
            if self.fail[event.video_id] > 0:
                self.fail[event.video_id] -= 1
                raise RetryableError("store down", retry_after=0.01)
            self.handled.append((event.video_id, record))
        finally:
            self.active -= 1
            self.active_videos[event.video_id] -= 1

    async def delete(self, event: VideoDeleted, record: RecordInfo) -> None:
        self.deleted.append((event.video_id, record))

    async def reject(self, error: InvalidEvent, record: RecordInfo) -> None:
        if self.reject_fails > 0:
            self.reject_fails -= 1
            raise RetryableError("status store down")
        self.rejected.append((error, record))
