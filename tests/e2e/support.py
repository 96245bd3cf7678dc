"""Shared pieces of the end-to-end tests: configs, sample videos, events, waiting, checks."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lance
import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from checkpoint.base import CheckpointStore, VideoState, VideoStatus
from consumers.events import VideoUploaded
from core.config import ServiceConfig, WebhookSubscription
from devkit.samples import Scene, write_video

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


def upload_record(video_id: str, path: Path, **extra: Any) -> tuple[bytes, bytes]:
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


# --- service processes: start, crash, stop ------------------------------------------------


def with_sections(config: ServiceConfig, **sections: dict[str, object]) -> ServiceConfig:
    """``config`` with some settings of some sections replaced (``runtime={"...": ...}``)."""
    data = {name: getattr(config, name).model_dump() for name in ServiceConfig.model_fields}
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    return ServiceConfig.load(**data)


def start_service(
    config_path: Path, secret: str, log: Path, *, ray_tmp: Path | None = None
) -> subprocess.Popen[bytes]:
    """``reelsense serve --config`` in a session of its own (its own local Ray).

    ``ray_tmp``: Ray's temp folder (keep the path short: Ray puts sockets there); a killed
    service leaves it behind, so the caller removes it. None: the service makes its own.
    """
    env = {**os.environ, "REELSENSE_NOTIFY_WEBHOOK_SECRETS": json.dumps([secret])}
    env.pop("RAY_TMPDIR", None)
    if ray_tmp is not None:
        ray_tmp.mkdir(parents=True, exist_ok=True)
        env["RAY_TMPDIR"] = str(ray_tmp)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--config", str(config_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def service_tree(process: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The service process and everything it started (Ray's GCS, raylet, workers)."""
    try:
        root = psutil.Process(process.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _left_behind(ray_tmp: Path) -> list[psutil.Process]:
    """Processes of a service's Ray that escaped its process tree (re-parented to init)."""
    marker = str(ray_tmp)
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info["cmdline"] or ()
            if (
                any(marker in part for part in cmdline)
                or proc.environ().get("RAY_TMPDIR") == marker
            ):
                found.append(proc)
    return [proc for proc in found if proc.pid != os.getpid()]


def kill_service(process: subprocess.Popen[bytes], *, ray_tmp: Path | None = None) -> None:
    """kill -9 of the service and what it started, as when a pod dies. Each process is killed
    by its PID: Ray's own processes may sit in sessions of their own. ``ray_tmp``: the Ray temp
    folder given to ``start_service``; processes using it are killed too."""
    tree = service_tree(process)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if ray_tmp is not None:
        tree += _left_behind(ray_tmp)
    for member in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    psutil.wait_procs(tree, timeout=10)


def stop_service(
    process: subprocess.Popen[bytes], *, timeout_s: float = 120, ray_tmp: Path | None = None
) -> int | None:
    """SIGTERM (a graceful stop), then kill -9 of whatever is left. Returns the exit code of a
    graceful stop, None if it had to be killed."""
    code: int | None = process.poll()
    if code is None:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
    kill_service(process, ray_tmp=ray_tmp)
    return code


def find_replica(process: subprocess.Popen[bytes], deployment: str) -> psutil.Process | None:
    """The Serve replica process of ``deployment`` (e.g. ``ocr``) under this service."""
    suffix = f"ServeReplica:reelsense-pools:{deployment}"
    for member in service_tree(process):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            title = " ".join(member.cmdline()) or member.name()
            if title.startswith("ray::") and title.split()[0].endswith(suffix):
                return member
    return None


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


async def wait_healthy(api_port: int, *, timeout_s: float = 240) -> None:
    """Until the service's API answers /healthz (its stage pools and consumer start with it)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"http://127.0.0.1:{api_port}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.5)
    raise AssertionError(f"the service on port {api_port} did not become healthy")
