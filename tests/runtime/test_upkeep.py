"""Upkeep: the events of records left queued or running with no live owner (a final transition
lost after its offset was committed) sent through again from the event each record kept, a
live attempt, a finished video and a record just sent left alone; index entries of expired
records, old dead letters and endpoint states, and persisted chunks left behind removed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from checkpoint.base import OutboxEvent
from checkpoint.chunk_store import ChunkStore
from checkpoint.redis_store import RedisCheckpointStore
from consumers.admin import ensure_topics
from consumers.events import parse_event
from core.config import ServiceConfig
from core.records import BULK_LANE, Chunk, VideoRef
from devkit.workload import read_records
from notify.base import DeadLetter, EndpointState, Outcome
from notify.delivery_log import RedisDeliveryLog
from runtime.upkeep import Upkeep
from storage.local import LocalObjectStore

V = "pv-sweep"


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[RedisCheckpointStore]:
    opened = RedisCheckpointStore.from_url(redis_url, key_prefix=f"sweep-{unique}")
    yield opened
    await opened.close()


def ref(video_id: str, **fields: object) -> VideoRef:
    return VideoRef(video_id, f"s3://uploads/acme/{video_id}.mp4", tenant="acme", **fields)  # type: ignore[arg-type]


async def test_records_left_without_an_owner_are_sent_through_again(
    store: RedisCheckpointStore, kafka_bootstrap: str, unique: str
) -> None:
    config = ServiceConfig.load(
        kafka={
            "bootstrap": kafka_bootstrap,
            "topic": f"up-{unique}",
            "bulk_topic": f"bulk-{unique}",
        },
        runtime={"sweep_after_s": 0.5},
    )
    kafka = config.kafka
    await ensure_topics(kafka_bootstrap, {kafka.topic: 1, f"bulk-{unique}": 1})
    lost = ref("lost", callback_url="http://hooks.acme.test/cb", metadata={"title": "café"})
    await store.mark_queued(lost, V)
    await store.claim(lost, V, owner="gone", lease_s=0.1)  # its owner never comes back
    bulk = ref("lost-bulk", lane=BULK_LANE)
    await store.mark_queued(bulk, V)
    await store.claim(bulk, V, owner="gone", lease_s=0.1)
    queued = ref("queued-only")
    await store.mark_queued(queued, V)
    live = ref("live")
    await store.mark_queued(live, V)
    await store.claim(live, V, owner="alive", lease_s=120)
    done = ref("done")
    await store.mark_queued(done, V)
    claim = await store.claim(done, V)
    outbox = OutboxEvent(
        type="video.done",
        video_id="done",
        tenant="acme",
        pipeline_version=V,
        timestamp=datetime.now(UTC),
    )
    await store.mark_done("done", claim.epoch, frames=1, timings={}, outbox=outbox)
    gone = ref("record-gone")  # its record lost, its index entry left behind
    await store.mark_queued(gone, V)
    await store._redis.delete(store.video_key("record-gone"))
    await asyncio.sleep(0.6)

    sweeper = Upkeep(store, config)
    assert await sweeper.sweep() == 3
    assert await sweeper.sweep() == 0  # each once per sweep_after_s
    fresh = await read_records(kafka_bootstrap, kafka.topic, 2)
    bulk_records = await read_records(kafka_bootstrap, f"bulk-{unique}", 1)
    await asyncio.sleep(0.6)
    assert await sweeper.sweep() == 3  # still left: sent again a period later
    events = {r.key: parse_event(r.key, r.value, max_bytes=65536) for r in fresh}
    assert set(events) == {b"lost", b"queued-only"}
    again = events[b"lost"]
    assert (again.uri, again.tenant, again.callback_url) == (lost.uri, "acme", lost.callback_url)
    assert again.metadata == {"title": "café"}
    assert [r.key for r in bulk_records] == [b"lost-bulk"]
    assert await store._redis.zscore(f"sweep-{unique}:idx:status:queued", "record-gone") is None


async def test_what_retention_let_go_leaves_nothing_behind(
    redis_url: str, unique: str, tmp_path: Path
) -> None:
    """Finished records expire after ``finished_retention_s``; their index entries, dead
    letters and endpoint states older than ``log_retention_s``, and the persisted chunks of
    finished videos (their removal failed) or of records long gone are removed; what is in use
    stays: a running video's chunks, a record that has not expired, a fresh endpoint state."""
    config = ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"up-{unique}", "finished_retention_s": 0.3},
        notify={"log_retention_s": 60},
        runtime={"sweep_after_s": 0.5},
    )
    store = RedisCheckpointStore(config.redis)
    delivery_log = RedisDeliveryLog.from_settings(config.redis, config.notify)
    chunks = ChunkStore(LocalObjectStore(tmp_path / "objects"))
    try:
        for video_id in ("old-1", "old-2"):
            await _done(store, ref(video_id))
        running = ref("running")
        await store.mark_queued(running, V)
        await store.claim(running, V, lease_s=60)
        for video_id, version in (("old-1", V), ("running", V), ("running", "older"), ("gone", V)):
            chunks.put(version, Chunk(video_id, 0, [], last=False), "origin")
        await asyncio.sleep(0.7)  # the done records expire; "gone"'s chunks grow old
        kept = ref("kept")
        await _done(store, kept)  # finished just now: not expired yet
        old = datetime.now(UTC) - timedelta(days=3)
        await delivery_log.save_endpoint(EndpointState(url="http://old.test/h", updated_at=old))
        await delivery_log.save_endpoint(
            EndpointState(url="http://new.test/h", updated_at=datetime.now(UTC))
        )
        await delivery_log.save_endpoint(EndpointState(url="http://unstamped.test/h"))
        await delivery_log.add_dead_letter(_letter("msg_old", old))
        await delivery_log.add_dead_letter(_letter("msg_new", datetime.now(UTC)))

        upkeep = Upkeep(store, config, delivery_log=delivery_log, chunks=chunks)
        assert await upkeep.prune() == 2 * 4 + 2  # 4 index entries per expired record
        assert await upkeep.sweep_chunks() == 3
        assert await upkeep.prune() == 0  # nothing more to do

        everything, _ = await store.list()
        assert [s.video_id for s in everything] == ["kept", "running"]
        for index in await store._redis.keys(f"up-{unique}:idx:*"):
            assert not set(await store._redis.zrange(index, 0, -1)) & {"old-1", "old-2"}
        assert sorted(e.url for e in await delivery_log.endpoints()) == [
            "http://new.test/h",
            "http://unstamped.test/h",  # stamped now: it goes one retention later
        ]
        assert [d.webhook_id for d in await delivery_log.dead_letters()] == ["msg_new"]
        assert chunks.left().keys() == {("running", V)}
    finally:
        await delivery_log.close()
        await store.close()


async def _done(store: RedisCheckpointStore, video: VideoRef) -> None:
    await store.mark_queued(video, V)
    claim = await store.claim(video, V)
    outbox = OutboxEvent(
        type="video.done",
        video_id=video.video_id,
        tenant=video.tenant,
        pipeline_version=V,
        timestamp=datetime.now(UTC),
    )
    await store.mark_done(video.video_id, claim.epoch, frames=1, timings={}, outbox=outbox)


def _letter(webhook_id: str, at: datetime) -> DeadLetter:
    event = OutboxEvent(
        type="video.done", video_id="v", tenant="acme", pipeline_version=V, timestamp=at
    )
    return DeadLetter(
        webhook_id=webhook_id,
        target="http://old.test/h",
        event=event,
        outcome=Outcome.DEAD_LETTERED,
        attempts=8,
        at=at,
    )
