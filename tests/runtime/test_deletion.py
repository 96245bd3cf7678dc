"""Taking a video down: its record a tombstone (``video.deleted`` announced), every sink's rows,
documents and thumbnails and its persisted chunks removed, and, once the tables purged, not a
byte of its burned-in text left in any file under the Lance root or the object store. An old
upload event replayed does not bring it back; one sent after the deletion does; a deletion
during processing stops the attempt, and nothing of it reappears."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from checkpoint.base import OutboxEvent, VideoState
from checkpoint.chunk_store import ChunkStore
from checkpoint.errors import VideoIdTaken
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from devkit.samples import Scene, write_video
from runtime.deletion import VideoDeleter
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from stages.pipeline import Pipeline
from storage.local import LocalObjectStore
from tests.runtime.support import processor

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deletion")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"del-{root.name}"},
        storage={
            "lance_uri": str(root / "lance"),
            "object_store_uri": str(root / "objects"),
            "lance_keep_versions_s": 0.5,
            "deletion_max_s": 4.0,  # purged 1.25 s after a deletion, old versions gone ~2 s on
        },
        limits={"file_roots": (str(root),)},
        stages={"sample_fps": 2.0, "chunk_frames": 2},
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


def deleter(
    config: ServiceConfig, results: LocalResults, store: RedisCheckpointStore
) -> VideoDeleter:
    chunks = ChunkStore(LocalObjectStore(config.storage.object_store_uri))
    return VideoDeleter(store, results, chunks, Pipeline.from_config(config).version)


def sign(root: Path, video_id: str, text: str, seconds: int = 2) -> VideoRef:
    scenes = [Scene((f"{text} {i}",), 1.0) for i in range(seconds)]
    path = write_video(root / f"{video_id}.mp4", scenes, fps=10, size=(320, 240))
    return VideoRef(video_id, path.as_uri(), tenant="acme")


def files_holding(config: ServiceConfig, needle: bytes) -> list[Path]:
    """Every file under the Lance root and the object store whose bytes hold ``needle``."""
    found = []
    for folder in (Path(config.storage.lance_uri), Path(config.storage.object_store_uri)):
        for path in folder.rglob("*"):
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
    return found


async def purged(config: ServiceConfig, needle: bytes, timeout_s: float = 60) -> list[Path]:
    """Until no file holds ``needle`` (or the time is up): the files that still do."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = files_holding(config, needle)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.5)


async def outbox_events(store: RedisCheckpointStore) -> list[OutboxEvent]:
    entries = await store._redis.xrange(store._outbox)
    return [OutboxEvent.model_validate_json(fields["event"]) for _, fields in entries]


async def test_a_deleted_video_leaves_no_byte_behind(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    gone = sign(root, "gone", "ZQXGONE")
    kept = sign(root, "kept", "ZQXKEPT")
    work = processor(config, executor, results, store)
    for ref in (gone, kept):
        assert await work.process(ref) == "done"
    assert files_holding(config, b"ZQXGONE")  # the check can see it while it is there

    assert await deleter(config, results, store).delete("gone", tenant="acme", asked_ms=0)

    record = await store.get("gone")
    assert record is not None
    assert (record.status, record.tenant) == (VideoState.DELETED, "acme")
    [notice] = [e for e in await outbox_events(store) if e.type == "video.deleted"]
    assert (notice.video_id, notice.tenant) == ("gone", "acme")
    assert await results.earlier("gone") is None
    assert await purged(config, b"ZQXGONE") == []  # the tables purge within deletion_max_s
    assert files_holding(config, b"ZQXKEPT")  # the other video is all there
    assert (await results.earlier("kept")) is not None


async def test_an_old_upload_replayed_does_not_bring_a_deleted_video_back(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    ref = sign(root, "again", "ZQXAGAIN")
    work = processor(config, executor, results, store)
    sent = int(time.time() * 1000)
    assert await work.process(VideoRef(**{**ref.__dict__, "sent_ms": sent})) == "done"
    deleted_at = sent + 1000
    await deleter(config, results, store).delete("again", tenant="acme", asked_ms=deleted_at)

    assert await work.process(VideoRef(**{**ref.__dict__, "sent_ms": sent})) == "skipped"
    record = await store.get("again")
    assert record is not None
    assert record.status is VideoState.DELETED
    assert await results.earlier("again") is None

    # An upload sent after the deletion is a new one: processed.
    assert await work.process(VideoRef(**{**ref.__dict__, "sent_ms": deleted_at + 1})) == "done"
    record = await store.get("again")
    assert record is not None
    assert record.status is VideoState.DONE
    assert await results.earlier("again") is not None


async def test_a_deletion_during_processing_stops_it_and_nothing_reappears(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    ref = sign(root, "midway", "ZQXMIDWAY", seconds=20)
    work = processor(config, executor, results, store, lease_s=0.6)
    running = asyncio.create_task(work.process(ref))
    while len(await store.chunks_done("midway")) < 2:
        assert not running.done(), "finished before it could be deleted"
        await asyncio.sleep(0.05)
    await deleter(config, results, store).delete("midway", tenant="acme", asked_ms=0)
    outcome = await asyncio.wait_for(running, timeout=120)
    assert outcome in ("skipped", "stale")
    record = await store.get("midway")
    assert record is not None
    assert record.status is VideoState.DELETED
    assert await results.earlier("midway") is None
    chunks = ChunkStore(LocalObjectStore(config.storage.object_store_uri))
    assert not [group for group in chunks.left() if group[0] == "midway"]
    assert await purged(config, b"ZQXMIDWAY") == []


async def test_another_tenant_cannot_delete_a_video(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    ref = sign(root, "owned", "ZQXOWNED")
    assert await processor(config, executor, results, store).process(ref) == "done"
    with pytest.raises(VideoIdTaken):
        await deleter(config, results, store).delete("owned", tenant="globex", asked_ms=0)
    record = await store.get("owned")
    assert record is not None
    assert record.status is VideoState.DONE
    assert await results.earlier("owned") is not None
    assert json.dumps(record.model_dump(mode="json"))  # the record is whole
