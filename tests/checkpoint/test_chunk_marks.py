"""Chunk-level checkpoints: persisted chunk outputs and their marks in the video record."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from checkpoint.base import OutboxEvent
from checkpoint.chunk_store import ChunkStore, chunk_origin, decode_chunk, encode_chunk
from checkpoint.errors import StaleEpoch
from checkpoint.redis_store import RedisCheckpointStore
from core.records import Chunk, Frame, OcrLine, VideoRef
from storage.local import LocalObjectStore

V1, V2 = "pv-1", "pv-2"


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[RedisCheckpointStore]:
    store = RedisCheckpointStore.from_url(redis_url, key_prefix=f"t-{unique}")
    yield store
    await store.close()


def chunk(index: int, *, last: bool = False) -> Chunk:
    frames = [
        Frame(
            index=index * 2 + i,
            timestamp_s=index + i / 2,
            image=None,
            ocr_lines=[OcrLine("欢迎 HELLO", 0.93, ((0.0, 1.0), (2.5, 1.0)))],
            caption="a sign",
            embedding=np.arange(4, dtype=np.float32) / (i + 1),
        )
        for i in range(2)
    ]
    frames[1].embedding = None
    return Chunk("v1", index, frames, last=last)


def test_chunk_outputs_round_trip_exactly(tmp_path: Path) -> None:
    original = chunk(3, last=True)
    decoded = decode_chunk(encode_chunk(original))
    assert decoded.index == 3
    assert decoded.last
    for got, want in zip(decoded.frames, original.frames, strict=True):
        assert (got.index, got.timestamp_s, got.caption) == (
            want.index,
            want.timestamp_s,
            want.caption,
        )
        assert got.ocr_lines == want.ocr_lines
        if want.embedding is None:
            assert got.embedding is None
        else:
            assert got.embedding is not None
            assert np.array_equal(got.embedding, want.embedding)
    chunks = ChunkStore(LocalObjectStore(str(tmp_path)))
    origin = chunk_origin(VideoRef("v1", "s3://uploads/acme/v1.mp4", tenant="acme"))
    chunks.put(V1, original, origin)
    chunks.put(V1, chunk(4), origin)
    assert chunks.get("v1", V1, 3, origin) is not None
    assert chunks.get("v1", V2, 3, origin) is None
    elsewhere = chunk_origin(VideoRef("v1", "s3://uploads/globex/v1.mp4", tenant="globex"))
    assert chunks.get("v1", V1, 3, elsewhere) is None  # another tenant's, another source
    assert chunks.delete_video("v1", V1) == 2
    assert chunks.get("v1", V1, 3, origin) is None


def test_image_embeddings_round_trip_and_older_chunks_have_none() -> None:
    original = chunk(0)
    original.frames[0].image_embedding = np.linspace(-1, 1, 8, dtype=np.float32)
    decoded = decode_chunk(encode_chunk(original))
    assert decoded.frames[0].image_embedding is not None
    assert np.array_equal(decoded.frames[0].image_embedding, original.frames[0].image_embedding)
    assert decoded.frames[1].image_embedding is None
    # A chunk persisted before image embeddings existed has no such key.
    older = json.loads(encode_chunk(original))
    for frame in older["frames"]:
        del frame["image_embedding"]
    assert all(f.image_embedding is None for f in decode_chunk(json.dumps(older).encode()).frames)


def event(video_id: str) -> OutboxEvent:
    return OutboxEvent(
        type="video.done",
        video_id=video_id,
        tenant="t",
        pipeline_version=V1,
        timestamp=datetime.now(UTC),
    )


async def test_chunk_marks_are_fenced_counted_and_cleared(store: RedisCheckpointStore) -> None:
    ref = VideoRef("v1", "file:///v1.mp4")
    first = await store.claim(ref, V1)
    await store.mark_chunk("v1", first.epoch, 0, restored=False, total=None)
    await store.mark_chunk("v1", first.epoch, 1, restored=False, total=3)
    assert await store.chunks_done("v1") == {0, 1}

    second = await store.claim(ref, V1)  # a restart: same version keeps the marks
    with pytest.raises(StaleEpoch):
        await store.mark_chunk("v1", first.epoch, 2, restored=False, total=3)
    assert await store.chunks_done("v1") == {0, 1}
    for index in (0, 1):
        await store.mark_chunk("v1", second.epoch, index, restored=True, total=3)
    await store.mark_chunk("v1", second.epoch, 2, restored=False, total=3)
    status = await store.get("v1")
    assert status is not None
    assert (status.chunks_total, status.chunks_processed, status.chunks_restored) == (3, 3, 2)

    await store.mark_done("v1", second.epoch, frames=6, timings={}, outbox=event("v1"))
    assert await store.chunks_done("v1") == set()

    third = await store.claim(ref, V2)  # a new pipeline version starts from nothing
    await store.mark_chunk("v1", third.epoch, 0, restored=False, total=None)
    status = await store.get("v1")
    assert status is not None
    assert (status.chunks_total, status.chunks_processed, status.chunks_restored) == (None, 1, 0)
