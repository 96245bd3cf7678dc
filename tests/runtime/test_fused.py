"""Stages fused into the decode replicas (``PoolSettings.fuse``), on real Ray Serve: chunks are
analysed where they are decoded and no pixels reach the object store; a stage left in a pool of
its own still reads the pixels there; a video that reuses an earlier result gets the stages it
still needs from the fused replicas."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from ray import serve

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from core.config import EmbedSettings, ServiceConfig
from core.records import LocalVideo, VideoRef
from devkit.samples import Scene, write_video
from devkit.tiny_vlm import build_tiny_qwen2_vl
from models.embedding import resolve_model_path
from runtime.executor import FusedChunk
from runtime.pools.base import INGEST, POOLS_APP
from runtime.pools.executor import RayExecutor
from runtime.pools.results import RayResults
from sinks.lance import LanceFrameSink, LanceSummarySink
from tests.runtime.support import processor

pytestmark = pytest.mark.slow


def fused_config(
    root: Path, redis_url: str, *, vlm: Path | None = None, decode_batch: int = 4
) -> ServiceConfig:
    """OCR, QR reading, frame hashes and embeddings fused into the decoder; a tiny VLM in a
    pool of its own if given. The labels are off: their pool would be one more on these cores,
    and they take OCR's path."""
    stages: dict[str, Any] = {"labels": {"enabled": False}}
    if vlm:  # a caption of every sample: what the plumbing carries is checked frame by frame
        stages["vlm"] = {
            "model": str(vlm),
            "output": "caption",
            "scope": "samples",
            "max_new_tokens": 2,
        }
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"fused-{root.name}"},
        storage={
            "lance_uri": str(root / "lance"),
            "object_store_uri": str(root / "objects"),
            "writer_flush_s": 0.1,
        },
        limits={"file_roots": (str(root),)},
        # A 384-d text model, so that the MiniLM copy a test changes to fits the same tables.
        stages={
            "sample_fps": 2.0,
            "chunk_frames": 2,
            "embed": {"model": "multilingual-e5-small"},
            **stages,
        },
        ray={
            "decode": {"num_cpus": 0.5, "max_batch_size": decode_batch},
            "ocr": {"fuse": True},
            "qr": {"fuse": True},
            "fingerprint": {"fuse": True},
            "embed": {"fuse": True},
            **({"vlm": {"num_cpus": 0.3}} if vlm else {}),
        },
        runtime={"workdir": str(root / "work"), "chunks_in_flight_per_video": 2},
    )


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture
async def store(tmp_path: Path, redis_url: str) -> AsyncIterator[RedisCheckpointStore]:
    store = RedisCheckpointStore(fused_config(tmp_path, redis_url).redis)
    yield store
    await store.close()


async def deployed(config: ServiceConfig) -> RayExecutor:
    return await asyncio.to_thread(RayExecutor.deploy, config)


async def process(
    config: ServiceConfig, executor: RayExecutor, store: RedisCheckpointStore, ref: VideoRef
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The video through the processor; its summary row and frame rows."""
    await processor(config, executor, RayResults.connect(config), store).process(ref)
    status = await store.get(ref.video_id)
    assert status is not None
    assert status.status is VideoState.DONE, status
    summary = LanceSummarySink(config.storage.lance_uri).video_row(ref.video_id)
    assert summary is not None
    rows = LanceFrameSink(config.storage.lance_uri).frame_rows(ref.video_id, with_embedding=True)
    return summary, rows


async def ingest_calls(stage: str) -> dict[str, int]:
    """Calls of ``stage`` per ingest replica."""
    ingest = serve.get_deployment_handle(INGEST, app_name=POOLS_APP)
    replies = await ingest.broadcast("activity").results_async()
    return {s.replica: s.calls for reply in replies for s in reply if s.stage == stage}


async def test_fused_stages_run_where_the_chunks_are_decoded(
    tmp_path: Path, redis_url: str, serve_apps: None, store: RedisCheckpointStore
) -> None:
    config = fused_config(tmp_path, redis_url)
    scenes = [Scene(("ALPHA",), 1.0), Scene(("OMEGA",), 1.0)]
    source = write_video(tmp_path / "fused.mp4", scenes, fps=10, size=(320, 240))
    ref = VideoRef("fused", source.as_uri())
    executor = await deployed(config)
    try:
        # No pool of their own: the pools application runs the decoder and the writer only.
        deployments = serve.status().applications[POOLS_APP].deployments
        assert set(deployments) == {INGEST, "sink-writer"}
        assert executor.inline == {"ocr", "qr", "fingerprint", "embed"}

        # Each chunk arrives analysed and embedded, with no pixels left to fetch.
        stream = executor.ingest(ref, inline=("ocr", "qr", "fingerprint", "embed"))
        assert isinstance(await anext(stream), LocalVideo)
        tickets = [item async for item in stream]
        assert all(isinstance(t, FusedChunk) for t in tickets)  # no pixels to read
        assert [t.index for t in tickets] == [0, 1]
        fused = [t.fused for t in tickets if isinstance(t, FusedChunk)]
        for outputs in fused:
            assert outputs.stages == {"ocr", "qr", "fingerprint", "embed"}
            assert set(outputs.seconds) == {"ocr", "qr", "fingerprint", "embed"}
            assert all(f.image is None for f in outputs.chunk.frames)
        texts = [f.ocr_text for outputs in fused for f in outputs.chunk.frames]
        assert any("ALPHA" in text for text in texts), texts
        assert any("OMEGA" in text for text in texts), texts
        ingest = serve.get_deployment_handle(INGEST, app_name=POOLS_APP)
        assert sum(await ingest.broadcast("held").results_async()) == 0

        # Through the processor: the same outputs reach the sinks, with each stage's time.
        summary, rows = await process(config, executor, store, ref)
        assert {"ocr", "embed"} <= set(summary["timings"])
        assert summary["timings"]["ocr"] > 0
        assert any("ALPHA" in row["ocr_text"] for row in rows)
        assert all(row["embedding"] is not None for row in rows if row["ocr_text"])
        # The fused stages' activity is the decoder replica's.
        activity = await executor.activity()
        decoders = {s.replica for s in activity["decode"]}
        assert {s.replica for s in activity["ocr"]} == decoders
        assert sum(s.items for s in activity["ocr"]) == 2 * len(rows)  # the stream, then the video
    finally:
        await executor.close()

    # Only the embedding model changes: OCR is taken from the result above and nothing is
    # decoded (the source is gone); the embedder still runs in the ingest replica.
    model = shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), tmp_path / "minilm-copy")
    new_embedder = config.model_copy(
        update={
            "stages": config.stages.model_copy(update={"embed": EmbedSettings(model=str(model))})
        }
    )
    source.unlink()
    executor = await deployed(new_embedder)
    try:
        before = sum((await ingest_calls("embed")).values())
        summary, reused = await process(new_embedder, executor, store, ref)
        assert "ocr" not in summary["timings"]
        assert "embed" in summary["timings"]
        assert [row["ocr_text"] for row in reused] == [row["ocr_text"] for row in rows]
        assert all(row["embedding"] is not None for row in reused if row["ocr_text"])
        # Two chunks, each embedded by a call routed to an ingest replica.
        assert sum((await ingest_calls("embed")).values()) - before == 2
    finally:
        await executor.close()


async def test_a_fused_stream_runs_ahead_and_stops_when_its_caller_leaves(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    # No pixels cross, so nothing paces the decoder (paced, it would stop at
    # runtime.decode_ahead_chunks, 2, until the first is taken); once the caller is done with
    # the stream, the call is cancelled and the replica stops decoding.
    config = fused_config(tmp_path, redis_url)
    scenes = [Scene((f"PAGE {n}",), 1.0) for n in range(60)]  # 60 chunks of 2 samples
    path = write_video(tmp_path / "long.mp4", scenes, fps=10, size=(160, 120))
    ref = VideoRef("abandoned", path.as_uri())
    executor = await deployed(config)
    try:
        before = sum((await ingest_calls("decode")).values())
        stream = executor.ingest(ref, inline=("ocr", "qr", "fingerprint", "embed"))
        assert isinstance(await anext(stream), LocalVideo)
        assert isinstance(await anext(stream), FusedChunk)
        deadline = asyncio.get_running_loop().time() + 60
        while (ahead := sum((await ingest_calls("decode")).values()) - before) <= 4:
            assert asyncio.get_running_loop().time() < deadline, ahead
            await asyncio.sleep(0.2)
        await stream.aclose()
        # Stopped: the count stays as it is for 2 s, short of the video's 60 chunks.
        deadline = asyncio.get_running_loop().time() + 60
        decoded, previous = ahead, -1
        while decoded != previous:
            assert asyncio.get_running_loop().time() < deadline, decoded
            await asyncio.sleep(2.0)
            previous, decoded = decoded, sum((await ingest_calls("decode")).values()) - before
        assert decoded < 60
    finally:
        await executor.close()


async def test_a_stage_in_a_pool_of_its_own_reads_the_pixels_the_decoder_put(
    tmp_path: Path, redis_url: str, serve_apps: None, store: RedisCheckpointStore, tiny_vlm: Path
) -> None:
    config = fused_config(tmp_path, redis_url, vlm=tiny_vlm)
    scenes = [Scene(("GAMMA",), 1.0), Scene(("DELTA",), 1.0)]
    source = write_video(tmp_path / "mixed.mp4", scenes, fps=10, size=(320, 240))
    executor = await deployed(config)
    try:
        assert set(serve.status().applications[POOLS_APP].deployments) == {
            INGEST,
            "vlm",
            "sink-writer",
        }
        summary, rows = await process(config, executor, store, VideoRef("mixed", source.as_uri()))
        # OCR ran in the decoder, the VLM in its pool on the pixels; the embedder (fused) after
        # both, on a merged chunk, through the ingest replicas.
        assert {"ocr", "vlm", "embed"} <= set(summary["timings"])
        assert any("GAMMA" in row["ocr_text"] for row in rows)
        assert all(row["caption"] for row in rows)
        assert all(row["embedding"] is not None for row in rows)
        activity = await executor.activity()
        assert sum(s.items for s in activity["vlm"]) == len(rows)
        assert sum(s.items for s in activity["ocr"]) == len(rows)
        assert {s.replica for s in activity["embed"]} == {s.replica for s in activity["decode"]}
    finally:
        await executor.close()


async def test_calls_routed_to_the_decoders_are_not_starved_by_streams(
    tmp_path: Path, redis_url: str, serve_apps: None, store: RedisCheckpointStore, tiny_vlm: Path
) -> None:
    # Decode batches of 1: the pools' own sizing gives the ingest replica 4 request slots, and
    # 5 videos stream at once. Every chunk's embedding is a call to the same replica (it reads
    # the VLM's captions, so it cannot run in the stream), and each stream waits for its chunks
    # to be taken: with the streams holding every slot, the embeddings, and so the videos,
    # would never finish (they did not, before the fused ingest pool was uncapped).
    config = fused_config(tmp_path, redis_url, vlm=tiny_vlm, decode_batch=1)
    refs = []
    for i in range(5):
        scenes = [Scene((f"PAGE {i} {n}",), 1.0) for n in range(4)]  # 4 chunks of 2 samples
        path = write_video(tmp_path / f"busy-{i}.mp4", scenes, fps=10, size=(160, 120))
        refs.append(VideoRef(f"busy-{i}", path.as_uri()))
    executor = await deployed(config)
    try:
        done = await asyncio.wait_for(
            asyncio.gather(*(process(config, executor, store, ref) for ref in refs)), 200
        )
        for summary, rows in done:
            assert {"vlm", "embed"} <= set(summary["timings"])
            assert len(rows) == 8
            assert all(row["embedding"] is not None and row["caption"] for row in rows)
    finally:
        await executor.close()
