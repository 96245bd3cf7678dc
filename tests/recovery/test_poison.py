"""A malformed re-send of a known video (issue 13): through the real consumer, the service's
handler, the processor and the Redis store, it is dead-lettered with its reason and its offset
committed, while the video's record (done, or running under another owner) stays exactly as it
was. Before the fix the store refused the failure with ``StaleEpoch`` and the consumer retried
that for ever: no dead letter, the partition's offset frozen at the record."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from checkpoint.base import OutboxEvent, VideoStatus
from checkpoint.chunk_store import ChunkStore
from checkpoint.errors import StaleEpoch
from checkpoint.redis_store import RedisCheckpointStore
from consumers.admin import ensure_topics
from consumers.base import RecordInfo
from consumers.dead_letter import DeadLetterHeaders
from consumers.errors import InvalidEvent
from consumers.events import VideoUploaded
from consumers.kafka import KafkaVideoConsumer
from core.config import KafkaSettings, ServiceConfig
from core.records import Chunk, EarlierResult, VideoRef, VideoResult
from devkit.workload import read_records
from runtime.deletion import VideoDeleter
from runtime.executor import IngestItem, PooledChunk, StageExecutor
from runtime.processor import VideoProcessor
from runtime.results import ResultStore
from runtime.service import _Handler
from stages.pipeline import Pipeline
from stages.sampling import ResumePoint
from storage.local import LocalObjectStore
from tests.consumers import event_bytes, kafka_settings, produce, wait_committed, wait_until

pytestmark = pytest.mark.timeout(120)


class _NoStages(StageExecutor):
    """An invalid event never reaches the stages: any call here fails the test."""

    image_stages = ("ocr",)
    embeds = True

    def ingest(
        self, ref: VideoRef, resume: ResumePoint | None = None, inline: Collection[str] = ()
    ) -> AsyncIterator[IngestItem]:
        raise AssertionError(f"ingest of {ref.video_id}")

    async def analyse(self, stage: str, ticket: PooledChunk) -> Chunk:
        raise AssertionError(f"{stage} of {ticket.video_id}")

    async def embed(self, chunk: Chunk) -> Chunk:
        raise AssertionError(f"embed of {chunk.video_id}")


class _NoResults(ResultStore):
    """An invalid event never reaches the stored results: a read or a write here fails the
    test (partial results are best effort, and an event that never ran has none)."""

    async def write(self, result: VideoResult) -> None:
        raise AssertionError(f"write of {result.ref.video_id}")

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        pass

    async def drop_partial(self, video_id: str) -> None:
        pass

    async def earlier(self, video_id: str) -> EarlierResult | None:
        raise AssertionError(f"earlier result of {video_id}")

    async def forget(self, videos: Sequence[VideoRef]) -> None:
        raise AssertionError(f"forget {[v.video_id for v in videos]}")


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[RedisCheckpointStore]:
    store = RedisCheckpointStore.from_url(redis_url, key_prefix=f"poison-{unique}")
    yield store
    await store.close()


def _processor(store: RedisCheckpointStore, tmp_path: Path) -> VideoProcessor:
    config = ServiceConfig.load(
        redis={"url": "redis://127.0.0.1:1/0"},  # unused: the store is given
        storage={"lance_uri": str(tmp_path / "lance"), "object_store_uri": str(tmp_path / "o")},
        runtime={"workdir": str(tmp_path / "work"), "executor": "local"},
    )
    return VideoProcessor(
        store=store,
        executor=_NoStages(),
        results=_NoResults(),
        chunks=ChunkStore(LocalObjectStore(config.storage.object_store_uri)),
        lineage=Pipeline.from_config(config).lineage,
        settings=config.runtime,
    )


async def _known(store: RedisCheckpointStore, video_id: str, version: str, state: str) -> None:
    """The video as a valid event left it: done, or running (claimed by another owner)."""
    ref = VideoRef(video_id, f"file:///videos/{video_id}.mp4", tenant="acme")
    await store.mark_queued(ref, version)
    claim = await store.claim(ref, version)
    if state == "done":
        outbox = OutboxEvent(
            type="video.done",
            video_id=video_id,
            tenant="acme",
            pipeline_version=version,
            timestamp=datetime.now(UTC),
        )
        await store.mark_done(video_id, claim.epoch, frames=4, timings={"ocr": 1.0}, outbox=outbox)


async def _outbox_length(redis_url: str, unique: str) -> int:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return int(await client.xlen(f"poison-{unique}:outbox"))
    finally:
        await client.aclose()


async def _run_until_dead_lettered(
    settings: KafkaSettings, handler: Any, count: int
) -> KafkaVideoConsumer:
    consumer = KafkaVideoConsumer(settings, handler)
    task = asyncio.create_task(consumer.run())
    try:
        await wait_until(lambda: consumer.stats().dead_lettered >= count, timeout_s=20)
        committed, ends = await wait_committed(
            settings.bootstrap, settings.group_id, settings.topic, 1
        )
        assert committed == ends  # past every poison record
    finally:
        await consumer.stop()
        await task
    return consumer


def _resends(video_id: str, kind: str) -> tuple[list[tuple[bytes | None, bytes | None]], list[str]]:
    """Records that name a known video but may not touch it, and the reason of each."""
    if kind == "malformed":
        extra = {**json.loads(event_bytes(video_id)), "extra": 1}
        records: list[tuple[bytes | None, bytes | None]] = [
            (video_id.encode(), json.dumps(extra).encode()),  # one field too many
            (b"someone-else", event_bytes(video_id)),  # key differs from the body's id
        ]
        return records, ["event_invalid", "event_key_mismatch"]
    # A valid event of another tenant: the id is acme's.
    theirs = VideoUploaded(video_id=video_id, uri="file:///videos/theirs.mp4", tenant="globex")
    return [(video_id.encode(), theirs.to_bytes())], ["video_id_taken"]


@pytest.mark.parametrize("kind", ["malformed", "other-tenant"])
@pytest.mark.parametrize("state", ["done", "running"])
async def test_a_resend_that_may_not_touch_a_known_video_is_dead_lettered_and_changes_nothing(
    kafka_bootstrap: str,
    redis_url: str,
    store: RedisCheckpointStore,
    unique: str,
    tmp_path: Path,
    state: str,
    kind: str,
) -> None:
    """Malformed re-sends, and another tenant's valid event for the id (video_id_taken)."""
    settings = kafka_settings(kafka_bootstrap, unique)
    await ensure_topics(kafka_bootstrap, {settings.topic: 1, settings.dead_letter_topic: 1})
    processor = _processor(store, tmp_path)
    video_id = f"known-{state}"
    await _known(store, video_id, processor.pipeline_version, state)
    before = await store.get(video_id)
    outbox_before = await _outbox_length(redis_url, unique)
    records, expected = _resends(video_id, kind)
    await produce(kafka_bootstrap, settings.topic, records)

    chunks = ChunkStore(LocalObjectStore(str(tmp_path / "o")))
    deleter = VideoDeleter(store, _NoResults(), chunks, processor.pipeline_version)
    handler = _Handler(processor, deleter)
    consumer = await _run_until_dead_lettered(settings, handler, len(records))

    assert consumer.stats().records_done == len(records)
    letters = await read_records(kafka_bootstrap, settings.dead_letter_topic, len(records))
    reasons = {
        (h := DeadLetterHeaders.from_headers(r.headers)).original_offset: h.reason_code
        for r in letters
    }
    assert reasons == dict(enumerate(expected))
    after = await store.get(video_id)
    assert isinstance(before, VideoStatus)
    assert after == before  # status, version, attempts, epoch, times: untouched
    assert (after.status, after.attempts) == (state, 1)
    assert await _outbox_length(redis_url, unique) == outbox_before  # no webhook either


class _RefusingHandler:
    """A handler whose reject the store refuses for good."""

    def __init__(self) -> None:
        self.rejects = 0

    async def handle(self, event: VideoUploaded, record: RecordInfo) -> None:
        raise AssertionError(f"no valid event was sent, got {event.video_id}")

    async def reject(self, error: InvalidEvent, record: RecordInfo) -> None:
        self.rejects += 1
        raise StaleEpoch(f"{error.video_id}: the record is done at epoch 3")


async def test_a_permanent_error_in_reject_ends_in_the_dead_letter_not_a_retry_loop(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = kafka_settings(kafka_bootstrap, unique)
    await ensure_topics(kafka_bootstrap, {settings.topic: 1, settings.dead_letter_topic: 1})
    await produce(kafka_bootstrap, settings.topic, [(b"v-1", b"{not json")])
    handler = _RefusingHandler()

    await _run_until_dead_lettered(settings, handler, 1)

    assert handler.rejects == 1  # tried once: retrying cannot fix a permanent error
    [letter] = await read_records(kafka_bootstrap, settings.dead_letter_topic, 1)
    assert DeadLetterHeaders.from_headers(letter.headers).reason_code == "event_not_json"


async def test_an_invalid_event_records_only_a_video_no_valid_event_made_known(
    store: RedisCheckpointStore, tmp_path: Path
) -> None:
    processor = _processor(store, tmp_path)
    version = processor.pipeline_version
    bad = InvalidEvent("uri: missing", code="event_invalid", video_id="x")

    async def reject(video_id: str) -> VideoStatus | None:
        await processor.reject(VideoRef(video_id, ""), bad)
        return await store.get(video_id)

    first = await reject("unknown")  # no record: the failure is recorded
    assert first is not None
    assert (first.status, first.error_code, first.stage) == ("failed", "event_invalid", "validate")
    assert await reject("unknown") == first  # replayed: the same record

    queued = VideoRef("queued", "file:///videos/queued.mp4", tenant="acme")
    await store.mark_queued(queued, version)
    failed = VideoRef("failed-in-a-run", "file:///videos/f.mp4", tenant="acme")
    claim = await store.claim(failed, version)
    outbox = OutboxEvent(
        type="video.failed",
        video_id=failed.video_id,
        tenant="acme",
        pipeline_version=version,
        timestamp=datetime.now(UTC),
    )
    reason: dict[str, Any] = {"code": "fetch_failed", "message": "gone", "stage": "fetch"}
    await store.mark_failed(failed, claim.epoch, pipeline_version=version, outbox=outbox, **reason)
    for video_id in ("queued", "failed-in-a-run"):
        before = await store.get(video_id)
        assert await reject(video_id) == before
