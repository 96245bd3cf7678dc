"""Work for a throwaway run of the service (a test, a soak) and reading back what it did.

Sample videos with burned-in words, upload events published to the broker, waiting until
every video is final, and what the broker and the sinks hold afterwards: committed and end
offsets, dead letters, frame rows.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lance
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from checkpoint.base import CheckpointStore, VideoState, VideoStatus
from consumers.events import VideoUploaded
from devkit.samples import Scene, write_video

WORDS = ("INVOICE", "HARBOR", "MARKET", "GARDEN", "ROCKET", "VIOLET", "BRIDGE", "CANYON")
SAMPLE_FPS = 10  # frame rate of the sample videos
SAMPLE_SIZE = (640, 360)

Headers = list[tuple[str, bytes]]


@dataclass(frozen=True)
class KafkaRecord:
    """A record to publish, or one read back."""

    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)

    def header(self, name: str) -> str:
        """The first header ``name`` as text ('' when absent)."""
        return next((v.decode(errors="replace") for k, v in self.headers if k == name), "")


@dataclass(frozen=True)
class Published:
    key: bytes | None
    partition: int
    offset: int


# -- sample videos ------------------------------------------------------------------------------


def write_videos(folder: Path, count: int, *, seconds_per_scene: float = 1.0) -> dict[str, Path]:
    """``count`` small 640x360 videos ``vid-NN``, two scenes each with distinct words."""
    folder.mkdir(parents=True, exist_ok=True)
    videos = {}
    for i in range(count):
        word = WORDS[i % len(WORDS)]
        scenes = [
            Scene(lines=(f"{word} {100 + i}",), seconds=seconds_per_scene),
            Scene(lines=(f"PAGE {i} END",), seconds=seconds_per_scene, background=(20, 30, 60)),
        ]
        video_id = f"vid-{i:02d}"
        path = folder / f"{video_id}.mp4"
        videos[video_id] = write_video(path, scenes, fps=SAMPLE_FPS, size=SAMPLE_SIZE)
    return videos


def write_random_videos(
    folder: Path, count: int, rng: random.Random, *, seconds: tuple[float, float] = (2.0, 20.0)
) -> dict[str, tuple[Path, int]]:
    """``count`` 640x360 videos ``chaos-NNN`` of a drawn length within ``seconds``, each of
    1-4 scenes of text. Returns video id -> (path, frames in the file)."""
    videos: dict[str, tuple[Path, int]] = {}
    for i in range(count):
        length = rng.uniform(*seconds)
        parts = rng.randint(1, 4)
        scenes = [
            Scene(
                lines=(f"{rng.choice(WORDS)} {i:03d}", f"PART {p + 1}"),
                seconds=length / parts,
                background=(rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255)),
            )
            for p in range(parts)
        ]
        video_id = f"chaos-{i:03d}"
        path = write_video(folder / f"{video_id}.mp4", scenes, fps=SAMPLE_FPS, size=SAMPLE_SIZE)
        frames = sum(max(1, round(scene.seconds * SAMPLE_FPS)) for scene in scenes)
        videos[video_id] = (path, frames)
    return videos


# -- events -------------------------------------------------------------------------------------


def upload_record(video_id: str, path: Path, **extra: Any) -> KafkaRecord:
    """The upload event of a local video file, keyed by its id."""
    event = VideoUploaded(video_id=video_id, uri=path.resolve().as_uri(), **extra)
    return KafkaRecord(video_id.encode(), event.to_bytes())


async def publish(
    bootstrap: str, topic: str, records: Iterable[KafkaRecord | tuple[bytes, bytes]]
) -> list[Published]:
    """Publish ``records`` in order, each acknowledged before the next; where each went."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        sent = []
        for record in records:
            out = record if isinstance(record, KafkaRecord) else KafkaRecord(*record)
            meta = await producer.send_and_wait(
                topic, out.value, key=out.key, headers=out.headers or None
            )
            sent.append(Published(out.key, meta.partition, meta.offset))
        return sent
    finally:
        await producer.stop()


async def wait_final(
    store: CheckpointStore, ids: Sequence[str], *, timeout_s: float = 600
) -> dict[str, VideoStatus]:
    """Until every one of ``ids`` is done or failed; AssertionError if not in time."""
    deadline = time.monotonic() + timeout_s
    statuses: dict[str, VideoStatus] = {}
    while time.monotonic() < deadline:
        for video_id in ids:
            status = await store.get(video_id)
            if status is not None:
                statuses[video_id] = status
        if len(statuses) == len(ids) and all(
            s.status in (VideoState.DONE, VideoState.FAILED) for s in statuses.values()
        ):
            return statuses
        await asyncio.sleep(0.5)
    raise AssertionError(f"not final in time: { {k: v.status for k, v in statuses.items()} }")


# -- reading back -------------------------------------------------------------------------------


def frame_keys(lance_root: Path) -> list[tuple[str, int]]:
    """(video id, timestamp ms) of every row of the frames table, repeats included."""
    table = lance.dataset(str(lance_root / "frames.lance")).to_table(
        columns=["video_id", "timestamp_ms"]
    )
    return list(zip(table["video_id"].to_pylist(), table["timestamp_ms"].to_pylist(), strict=True))


def lance_tables(lance_root: Path) -> set[str]:
    """The names of the Lance tables under ``lance_root``."""
    return {path.stem for path in lance_root.glob("*.lance")}


async def committed_and_end(
    bootstrap: str, topic: str, group: str
) -> tuple[dict[int, int], dict[int, int]]:
    """Per partition of ``topic``: the offset ``group`` committed (0 if none) and the end."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends = await consumer.end_offsets(partitions)
        committed = {tp.partition: (await consumer.committed(tp)) or 0 for tp in partitions}
        return committed, {tp.partition: off for tp, off in ends.items()}
    finally:
        await consumer.stop()


async def end_offsets_by_reading(bootstrap: str, topic: str) -> dict[int, int]:
    """End offset per partition found by reading every record (Tansu's S3 storage engine
    answers ListOffsets with stale high watermarks)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = {tp.partition: 0 for tp in partitions}
        idle = 0
        while idle < 3:
            batch = await consumer.getmany(timeout_ms=500)
            idle = 0 if batch else idle + 1
            for tp, records in batch.items():
                ends[tp.partition] = max(ends[tp.partition], records[-1].offset + 1)
        return ends
    finally:
        await consumer.stop()


async def read_records(
    bootstrap: str, topic: str, expected: int, *, timeout_s: float = 30
) -> list[KafkaRecord]:
    """The records of ``topic`` from its start, until ``expected`` of them came or the time
    is up (a dead-letter topic: what the service parked there)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    found: list[KafkaRecord] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(found) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                found += [KafkaRecord(r.key, r.value, list(r.headers)) for r in records]
    finally:
        await consumer.stop()
    return found
