"""Shared pieces of the end-to-end tests: configs, sample videos, events, waiting, checks."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from pathlib import Path

import lance
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from checkpoint.base import CheckpointStore, VideoState, VideoStatus
from consumers.events import VideoUploaded
from core.config import ServiceConfig, WebhookSubscription
from service.samples import Scene, write_video

WORDS = ("INVOICE", "HARBOR", "MARKET", "GARDEN", "ROCKET", "VIOLET", "BRIDGE", "CANYON")


def webhook_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def service_config(
    root: Path,
    *,
    bootstrap: str,
    redis_url: str,
    unique: str,
    api_port: int,
    hook_url: str,
    secret: str,
    executor: str = "ray",
) -> ServiceConfig:
    return ServiceConfig.load(
        kafka={
            "bootstrap": bootstrap,
            "topic": f"uploads-{unique}",
            "dead_letter_topic": f"uploads-{unique}.dlq",
            "status_topic": f"status-{unique}",
            "group_id": f"group-{unique}",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "max_in_flight": 4,
            "commit_interval_s": 0.2,
        },
        redis={"url": redis_url, "key_prefix": f"rs-{unique}"},
        storage={
            "lance_uri": str(root / "lance"),
            "object_store_uri": str(root / "objects"),
            "writer_flush_s": 0.2,
        },
        limits={"file_roots": (str(root / "videos"),)},
        stages={"sample_fps": 1.0, "chunk_frames": 2},
        notify={
            "webhook_secrets": (secret,),
            "subscriptions": (WebhookSubscription(url=hook_url),),
            "allow_private_targets": True,
            "retry_schedule_s": (0.2, 0.5, 1.0, 2.0),
        },
        api={"port": api_port},
        runtime={"workdir": str(root / "work"), "executor": executor, "retry_backoff_s": (0.2,)},
    )


def write_videos(folder: Path, count: int, *, seconds_per_scene: float = 1.0) -> dict[str, Path]:
    """``count`` small 640x360 videos, two scenes each with distinct burned-in words."""
    folder.mkdir(parents=True, exist_ok=True)
    videos = {}
    for i in range(count):
        word = WORDS[i % len(WORDS)]
        scenes = [
            Scene(lines=(f"{word} {100 + i}",), seconds=seconds_per_scene),
            Scene(lines=(f"PAGE {i} END",), seconds=seconds_per_scene, background=(20, 30, 60)),
        ]
        video_id = f"vid-{i:02d}"
        videos[video_id] = write_video(folder / f"{video_id}.mp4", scenes, fps=10, size=(640, 360))
    return videos


async def publish(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


def upload_record(video_id: str, path: Path, **extra: str) -> tuple[bytes, bytes]:
    event = VideoUploaded(video_id=video_id, uri=path.resolve().as_uri(), **extra)
    return video_id.encode(), event.to_bytes()


async def wait_final(
    store: CheckpointStore, ids: list[str], *, timeout_s: float = 600
) -> dict[str, VideoStatus]:
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


def frame_keys(lance_root: Path) -> list[tuple[str, int]]:
    table = lance.dataset(str(lance_root / "frames.lance")).to_table(
        columns=["video_id", "timestamp_ms"]
    )
    return list(zip(table["video_id"].to_pylist(), table["timestamp_ms"].to_pylist(), strict=True))


async def committed_and_end(
    bootstrap: str, topic: str, group: str
) -> tuple[dict[int, int], dict[int, int]]:
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


async def dead_letters(
    bootstrap: str, topic: str, expected: int
) -> list[tuple[bytes | None, dict[str, str]]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    found: list[tuple[bytes | None, dict[str, str]]] = []
    try:
        deadline = time.monotonic() + 30
        while len(found) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    headers = {k: v.decode(errors="replace") for k, v in record.headers}
                    found.append((record.key, headers))
    finally:
        await consumer.stop()
    return found


def dump_config(config: ServiceConfig, path: Path) -> Path:
    """YAML for ``reelsense serve --config``; secrets travel in the environment instead."""
    data = json.loads(config.model_dump_json())
    data["notify"].pop("webhook_secrets", None)
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path
