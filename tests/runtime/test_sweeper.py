"""The sweeper sends through again the events of records left queued or running with no live
owner (a final transition lost after its offset was committed), from the event each record
kept; a live attempt, a finished video and a record just sent are left alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from checkpoint.base import OutboxEvent
from checkpoint.redis_store import RedisCheckpointStore
from consumers.admin import ensure_topics
from consumers.events import parse_event
from core.config import KafkaSettings, RuntimeSettings
from core.records import BULK_LANE, VideoRef
from devkit.workload import read_records
from runtime.sweeper import RecordSweeper

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
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap, topic=f"up-{unique}", bulk_topic=f"bulk-{unique}"
    )
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

    sweeper = RecordSweeper(store, kafka, RuntimeSettings(sweep_after_s=0.5))
    try:
        assert await sweeper.sweep() == 3
        assert await sweeper.sweep() == 0  # each once per sweep_after_s
        fresh = await read_records(kafka_bootstrap, kafka.topic, 2)
        bulk_records = await read_records(kafka_bootstrap, f"bulk-{unique}", 1)
        await asyncio.sleep(0.6)
        assert await sweeper.sweep() == 3  # still left: sent again a period later
    finally:
        await sweeper.close()
    events = {r.key: parse_event(r.key, r.value, max_bytes=65536) for r in fresh}
    assert set(events) == {b"lost", b"queued-only"}
    again = events[b"lost"]
    assert (again.uri, again.tenant, again.callback_url) == (lost.uri, "acme", lost.callback_url)
    assert again.metadata == {"title": "café"}
    assert [r.key for r in bulk_records] == [b"lost-bulk"]
    assert await store._redis.zscore(f"sweep-{unique}:idx:status:queued", "record-gone") is None
