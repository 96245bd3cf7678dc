"""The per-video orchestration in one process (LocalExecutor): resume at the first unfinished
chunk after a crash, fenced sink writes, and rebuilding a lost record from the sinks."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import lance
import pytest
from pydantic import SecretStr

from checkpoint.base import OutboxEvent, VideoState, VideoStatus
from checkpoint.chunk_store import ChunkStore
from checkpoint.errors import StaleEpoch, VideoBusy, VideoIdTaken
from checkpoint.redis_store import RedisCheckpointStore
from consumers.base import RecordInfo
from consumers.errors import InvalidEvent
from consumers.events import parse_event
from core.config import (
    EmbedSettings,
    OcrSettings,
    ServiceConfig,
    StorageSettings,
    VlmSettings,
)
from core.errors import RetryableError
from core.records import Chunk, EarlierResult, LocalVideo, ProbeInfo, VideoRef, VideoResult
from core.speech import SpeechEnd, SpeechPart
from core.stage_names import DECODE
from devkit.samples import Scene, write_video
from devkit.services import moto_server
from devkit.tiny_vlm import build_tiny_qwen2_vl
from models.embedding import resolve_model_path
from runtime.deletion import VideoDeleter
from runtime.executor import IngestItem, PooledChunk, StageExecutor
from runtime.lease import AttemptStalled, Heartbeat, claim_when_free, holding
from runtime.local_executor import LocalExecutor
from runtime.messages import DONE_TEXT_CHARS, done_message_data
from runtime.pools.executor import RayExecutor
from runtime.processor import VideoProcessor
from runtime.results import LocalResults, ResultStore
from runtime.service import _Handler
from sinks.lance import LanceFrameSink, LanceSummarySink
from sinks.object_store import document_key
from stages.pipeline import Pipeline
from stages.sampling import ResumePoint
from storage.local import LocalObjectStore
from storage.s3 import S3ObjectStore, s3_client
from tests.runtime.support import all_done, processor, text_videos
from tests.sinks import make_result


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("processor")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"proc-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        # A 384-d text model, so that the MiniLM copy a test changes to fits the same tables.
        stages={"sample_fps": 2.0, "chunk_frames": 2, "embed": {"model": "multilingual-e5-small"}},
        runtime={
            "workdir": str(root / "work"),
            "executor": "local",
            "chunks_in_flight_per_video": 2,
        },
    )


def frame_keys(config: ServiceConfig, video_id: str) -> Counter[int]:
    table = lance.dataset(f"{config.storage.lance_uri}/frames.lance").to_table(
        columns=["video_id", "timestamp_ms"], filter=f"video_id = '{video_id}'"
    )
    return Counter(table["timestamp_ms"].to_pylist())


async def interrupted(
    root: Path,
    video_id: str,
    text: str,
    seconds: int,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
    *,
    after: int,
) -> VideoRef:
    """A video of ``seconds`` one-second scenes, its processing stopped dead once ``after``
    chunks are recorded (as if the process died there: nothing after that point happens)."""
    scenes = [Scene((f"{text} {i}",), 1.0) for i in range(seconds)]
    path = write_video(root / f"{video_id}.mp4", scenes, fps=10, size=(320, 240))
    ref = VideoRef(video_id, path.as_uri())
    first = asyncio.create_task(processor(config, executor, results, store).process(ref))
    while len(await store.chunks_done(video_id)) < after:
        assert not first.done(), "the video finished before it could be interrupted"
        await asyncio.sleep(0.05)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    return ref


async def test_a_crashed_video_resumes_at_its_first_unfinished_chunk(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    ref = await interrupted(root, "long", "PART", 8, config, executor, results, store, after=4)
    persisted = await store.chunks_done("long")

    await processor(config, executor, results, store).process(ref)

    status = await store.get("long")
    assert status is not None
    assert status.status is VideoState.DONE
    assert status.chunks_total == 8  # 16 frames at 2 fps, 2 per chunk
    # Those recorded, and any persisted in the moment between its object and its record.
    assert status.chunks_restored >= len(persisted)
    # Only what was in flight at the crash is computed twice.
    assert (
        status.chunks_processed - status.chunks_total <= config.runtime.chunks_in_flight_per_video
    )
    keys = frame_keys(config, "long")
    assert sum(keys.values()) == status.frames == 16
    assert max(keys.values()) == 1
    assert await store.chunks_done("long") == set()
    assert not list((root / "objects").glob("chunks/long/**/*.json"))


async def test_a_cancelled_video_gives_its_threads_back_before_it_ends(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelled while its chunks wait for their stages, the orchestration awaiting outside the
    ingest stream: the streams close with the task, and the threads its decoding and speech
    leased are back when the cancellation returns, not whenever the garbage collector finds
    the streams."""
    path = write_video(root / "stuck.mp4", [Scene(("STUCK",), 4.0)], fps=10, size=(320, 240))
    never = asyncio.Event()

    async def stuck(stage: str, ticket: PooledChunk) -> Chunk:
        await never.wait()
        raise AssertionError("never let go")

    monkeypatch.setattr(executor, "analyse", stuck)
    work = processor(config, executor, results, store, chunks_in_flight_per_video=1)
    task = asyncio.create_task(work.process(VideoRef("stuck", path.as_uri())))
    # Its first chunk at a stage, the second decoded and waiting for room (one in flight).
    while (status := await store.get("stuck")) is None or decoded(status) < 2:
        assert not task.done()
        await asyncio.sleep(0.05)
    assert executor._threads.leased > 0
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert executor._threads.leased == 0


def decoded(status: VideoStatus) -> int:
    progress = status.stages.get(DECODE)
    return 0 if progress is None else progress.done


async def test_chunks_persisted_before_redis_lost_its_state_are_not_recomputed(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    # A chunk write already in a worker thread at the interruption still lands: the attempt's
    # threads are its own, and all of them end before the chunks are counted.
    loop = asyncio.get_running_loop()
    threads = ThreadPoolExecutor()
    loop.set_default_executor(threads)
    try:
        ref = await interrupted(
            root, "flushed", "PAGE", 6, config, executor, results, store, after=3
        )
    finally:
        threads.shutdown(wait=True)
        loop.set_default_executor(ThreadPoolExecutor())
    objects = root / "objects" / "chunks" / "flushed"
    persisted = len(list(objects.rglob("[0-9]*.json")))  # chunks, not the speech beside them
    assert persisted >= 3
    await store._redis.delete(store.video_key("flushed"))  # the record and its chunk marks

    await processor(config, executor, results, store).process(ref)

    status = await store.get("flushed")
    assert status is not None
    assert status.status is VideoState.DONE
    assert status.chunks_restored == persisted
    assert status.chunks_processed == status.chunks_total - persisted
    assert sum(frame_keys(config, "flushed").values()) == status.frames == 12
    assert not list(objects.rglob("*.json"))


@pytest.mark.parametrize("claimant", ["another tenant", "another source"])
async def test_persisted_chunks_are_restored_only_for_their_own_tenant_and_source(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
    claimant: str,
) -> None:
    """Redis lost the record of an interrupted video: the next claimant of the id, when it is
    another tenant or another file, computes every chunk itself; what the first attempt found
    is never handed to it."""
    video_id = f"crossed-{claimant.split()[1]}"
    first = await interrupted(
        root, video_id, "SECRET", 6, config, executor, results, store, after=3
    )
    await store._redis.delete(store.video_key(video_id))
    if claimant == "another tenant":
        ref = VideoRef(video_id, first.uri, tenant="globex")
    else:
        other = write_video(
            root / f"{video_id}-other.mp4",
            [Scene((f"OTHER {i}",), 1.0) for i in range(6)],
            fps=10,
            size=(320, 240),
        )
        ref = VideoRef(video_id, other.as_uri())

    await processor(config, executor, results, store).process(ref)

    status = await store.get(video_id)
    assert status is not None
    assert (status.status, status.tenant) == (VideoState.DONE, ref.tenant)
    assert status.chunks_restored == 0
    assert status.chunks_processed == status.chunks_total


async def test_a_failed_video_leaves_no_persisted_chunks(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    # An earlier attempt persisted a chunk; then the source turns out to be unreadable.
    (root / "gone.mp4").write_bytes(b"not a video at all")
    ref = VideoRef("gone", (root / "gone.mp4").as_uri())
    chunks = ChunkStore(LocalObjectStore(config.storage.object_store_uri))
    version = Pipeline.from_config(config).version
    chunks.put(version, Chunk("gone", 0, [], last=False), "an origin")
    assert chunks.indexes("gone", version) == {0}

    await processor(config, executor, results, store).process(ref)

    status = await store.get("gone")
    assert status is not None
    assert status.status is VideoState.FAILED
    assert chunks.indexes("gone", version) == set()


async def test_a_replay_of_a_done_video_removes_chunks_a_crash_left_behind(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    """The process died while it removed a done video's persisted chunks (after the done
    transition, before the offset commit): the redelivered event is skipped and removes them."""
    path = write_video(root / "tidy.mp4", [Scene(("TIDY",), 1.5)], fps=10, size=(320, 240))
    ref = VideoRef("tidy", path.as_uri())
    await processor(config, executor, results, store).process(ref)
    chunks = ChunkStore(LocalObjectStore(config.storage.object_store_uri))
    version = Pipeline.from_config(config).version
    chunks.put(version, Chunk("tidy", 1, [], last=True), "an origin")  # what the crash left
    assert chunks.indexes("tidy", version) == {1}

    await processor(config, executor, results, store).process(ref)

    status = await store.get("tidy")
    assert status is not None
    assert (status.status, status.attempts) == (VideoState.DONE, 1)  # skipped, not redone
    assert chunks.indexes("tidy", version) == set()


async def test_results_of_a_stale_attempt_are_refused(
    root: Path, config: ServiceConfig, results: LocalResults, store: RedisCheckpointStore
) -> None:
    ref = VideoRef("fenced", "file:///nowhere.mp4")
    old = await store.claim(ref, "pv")
    new = await store.claim(ref, "pv")
    probe = ProbeInfo("mp4", "h264", 320, 240, 10.0, 1.0, 1, 0, 1000)
    result = VideoResult(ref, "pv", probe, [], datetime.now(UTC), epoch=old.epoch)
    with pytest.raises(StaleEpoch):
        await results.write(result)
    await results.write(VideoResult(ref, "pv", probe, [], datetime.now(UTC), epoch=new.epoch))
    earlier = await results.earlier("fenced")
    assert earlier is not None
    assert (earlier.pipeline_version, earlier.frame_count) == ("pv", 0)


async def test_a_lost_record_is_rebuilt_from_the_sinks(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    path = write_video(root / "short.mp4", [Scene(("HELLO",), 1.5)], fps=10, size=(320, 240))
    ref = VideoRef("short", path.as_uri())
    work = processor(config, executor, results, store)
    await work.process(ref)
    done = await store.get("short")
    assert done is not None
    assert done.chunks_processed == 2
    await store._redis.delete(store.video_key("short"))  # Redis lost the record

    await work.process(ref)
    rebuilt = await store.get("short")
    assert rebuilt is not None
    assert rebuilt.status is VideoState.DONE
    assert rebuilt.frames == done.frames
    assert rebuilt.chunks_processed == 0  # nothing was computed again


class _HeldResults(ResultStore):
    """Stored results in memory: one earlier result for every video, and what was asked."""

    def __init__(self, held: EarlierResult) -> None:
        self.held = held
        self.asked: list[str] = []
        self.written: list[VideoResult] = []

    async def earlier(self, video_id: str) -> EarlierResult | None:
        self.asked.append(video_id)
        return self.held

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        self.written.extend(parts)

    async def drop_partial(self, video_id: str) -> None:
        pass

    async def write(self, result: VideoResult) -> None:
        self.written.append(result)

    async def forget(self, videos: Sequence[VideoRef]) -> None:
        pass


@pytest.mark.parametrize("executor_class", [StageExecutor, LocalExecutor, RayExecutor])
def test_an_executor_runs_stages_and_reaches_no_stored_result(
    executor_class: type[StageExecutor],
) -> None:
    doors = ("write", "write_partial", "drop_partial", "earlier", "forget")
    assert [door for door in doors if hasattr(executor_class, door)] == []


async def test_the_earlier_result_is_read_through_the_store_the_processor_was_given(
    config: ServiceConfig, executor: LocalExecutor, store: RedisCheckpointStore
) -> None:
    version = Pipeline.from_config(config).version
    held = _HeldResults(EarlierResult(pipeline_version=version, frame_count=7))
    ref = VideoRef("given-store", "file:///nowhere/given-store.mp4")  # no stage could open it

    await processor(config, executor, held, store).process(ref)

    assert held.asked == ["given-store"]
    assert held.written == []  # the store held this version's result: nothing is written
    status = await store.get("given-store")
    assert status is not None
    assert (status.status, status.frames) == (VideoState.DONE, 7)


async def test_a_lost_record_is_rebuilt_only_for_its_own_tenant_and_source(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    """Redis lost the record: another tenant's event for the id is refused as video_id_taken
    and leaves nothing of its own: the record goes back to the first tenant as the sinks hold
    it (done, its frames, its source), nobody is told of a failure. The same id with another
    source is computed afresh rather than rebuilt from the old source's result."""
    path = write_video(root / "owned.mp4", [Scene(("MINE",), 1.5)], fps=10, size=(320, 240))
    work = processor(config, executor, results, store)
    await work.process(VideoRef("owned", path.as_uri(), tenant="acme"))
    done = await store.get("owned")
    assert done is not None
    await store._redis.delete(store.video_key("owned"))
    outbox_before = await store._redis.xlen(store._outbox)

    with pytest.raises(VideoIdTaken):
        await work.process(VideoRef("owned", path.as_uri(), tenant="globex"))
    back = await store.get("owned")
    assert back is not None
    assert (back.status, back.tenant, back.uri) == (VideoState.DONE, "acme", path.as_uri())
    assert (back.pipeline_version, back.frames) == (done.pipeline_version, done.frames)
    assert back.error_code is None
    assert await store._redis.xlen(store._outbox) == outbox_before  # no failure announced
    acme, _ = await store.list(tenant="acme")
    assert "owned" in [status.video_id for status in acme]
    globex, _ = await store.list(tenant="globex")
    assert "owned" not in [status.video_id for status in globex]
    await store._redis.delete(store.video_key("owned"))

    other = write_video(root / "other.mp4", [Scene(("OTHER",), 1.5)], fps=10, size=(320, 240))
    await work.process(VideoRef("owned", other.as_uri(), tenant="acme"))
    again = await store.get("owned")
    assert again is not None
    assert again.status is VideoState.DONE
    assert again.chunks_processed == 2  # computed, not rebuilt


@pytest.mark.parametrize("named", ["acme", None])
async def test_an_invalid_event_takes_no_id_from_the_valid_one_after_it(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
    named: str | None,
) -> None:
    """A malformed event for a new id is shown as failed (under the tenant its body names,
    else the default one); the tenant's corrected event then claims the id and is done,
    instead of being dead-lettered as video_id_taken."""
    video_id = f"fresh-{named}"
    path = write_video(root / f"{video_id}.mp4", [Scene(("OK",), 1.0)], fps=10, size=(320, 240))
    work = processor(config, executor, results, store)
    chunks = ChunkStore(LocalObjectStore(config.storage.object_store_uri))
    handler = _Handler(work, VideoDeleter(store, results, chunks, work.pipeline_version))
    record = RecordInfo("uploads", 0, 0, video_id.encode(), 0)
    malformed = {"video_id": video_id, **({"tenant": named} if named else {})}
    with pytest.raises(InvalidEvent) as invalid:
        parse_event(video_id.encode(), json.dumps(malformed).encode(), max_bytes=65536)
    await handler.reject(invalid.value, record)
    rejected = await store.get(video_id)
    assert rejected is not None
    assert (rejected.status, rejected.error_code) == (VideoState.FAILED, "event_invalid")
    assert rejected.tenant == (named or "default")

    valid = {"video_id": video_id, "uri": path.as_uri(), "tenant": "acme"}
    await handler.handle(
        parse_event(video_id.encode(), json.dumps(valid).encode(), max_bytes=65536), record
    )
    done = await store.get(video_id)
    assert done is not None
    assert (done.status, done.tenant, done.error_code) == (VideoState.DONE, "acme", None)


def with_stages(config: ServiceConfig, **changes: object) -> ServiceConfig:
    return config.model_copy(update={"stages": config.stages.model_copy(update=changes)})


async def test_a_new_pipeline_version_recomputes_only_the_stages_that_changed(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    scenes = [Scene(("ALPHA",), 1.0), Scene(("OMEGA",), 1.0)]
    source = write_video(root / "versions.mp4", scenes, fps=10, size=(320, 240))
    ref = VideoRef("versions", source.as_uri())
    summaries = LanceSummarySink(f"{config.storage.lance_uri}")
    frames = LanceFrameSink(f"{config.storage.lance_uri}")

    async def run(
        cfg: ServiceConfig, stage_executor: LocalExecutor, stage_results: LocalResults
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        await processor(cfg, stage_executor, stage_results, store).process(ref)
        status = await store.get("versions")
        assert status is not None
        assert status.status is VideoState.DONE, status
        assert status.pipeline_version == Pipeline.from_config(cfg).version
        row = summaries.video_row("versions")
        assert row is not None
        return row, frames.frame_rows("versions", with_embedding=True)

    first, first_frames = await run(config, executor, results)
    assert {"ocr", "embed"} <= set(first["timings"])

    # A VLM stage is added: decoding and OCR are unchanged, so OCR is taken from the first
    # result; the VLM runs on freshly decoded pixels, and the embeddings read its captions.
    vlm = build_tiny_qwen2_vl(root / "tiny-vlm")
    captions = VlmSettings(model=str(vlm), output="caption", scope="samples", max_new_tokens=4)
    with_vlm = with_stages(config, vlm=captions)
    vlm_executor, vlm_results = LocalExecutor(with_vlm), LocalResults(with_vlm)
    try:
        second, second_frames = await run(with_vlm, vlm_executor, vlm_results)
    finally:
        await vlm_executor.close()
        await vlm_results.close()
    assert "vlm" in second["timings"]
    assert "ocr" not in second["timings"]
    assert [f["ocr_text"] for f in second_frames] == [f["ocr_text"] for f in first_frames]
    assert all(f["caption"] for f in second_frames)
    assert {f["pipeline_version"] for f in second_frames} == {second["pipeline_version"]}
    assert len(second_frames) == len(first_frames)

    # Only the embedding model changes: nothing reads pixels, so nothing is decoded (the source
    # is gone and the video still completes); OCR and captions come from the second result.
    model = shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), root / "minilm-copy")
    new_embedder = with_stages(with_vlm, embed=EmbedSettings(model=str(model)))
    source.unlink()
    embed_executor, embed_results = LocalExecutor(new_embedder), LocalResults(new_embedder)
    try:
        third, third_frames = await run(new_embedder, embed_executor, embed_results)
    finally:
        await embed_executor.close()
        await embed_results.close()
    assert set(third["timings"]) & {"ocr", "vlm"} == set()
    assert "embed" in third["timings"]
    assert [(f["ocr_text"], f["caption"]) for f in third_frames] == [
        (f["ocr_text"], f["caption"]) for f in second_frames
    ]
    assert all(f["embedding"] is not None for f in third_frames if f["ocr_text"] or f["caption"])
    assert (
        len({first["pipeline_version"], second["pipeline_version"], third["pipeline_version"]}) == 3
    )
    assert sum(frame_keys(config, "versions").values()) == len(first_frames)


def test_stage_versions_change_with_what_each_stage_reads(config: ServiceConfig) -> None:
    base = Pipeline.from_config(config).lineage
    ocr_changed = Pipeline.from_config(with_stages(config, ocr=OcrSettings(min_score=0.9))).lineage
    resampled = Pipeline.from_config(with_stages(config, sample_fps=3.0)).lineage
    # The labels and the QR codes read pixels too, not OCR's text: they are kept.
    assert ocr_changed.reusable(base.versions) == frozenset({"labels", "qr", "fingerprint"})
    assert ocr_changed.versions["decode"] == base.versions["decode"]
    assert ocr_changed.versions["embed"] != base.versions["embed"]  # it reads OCR's text
    assert resampled.reusable(base.versions) == frozenset()
    framed = [s for s in base.versions if s != "speech"]  # speech reads the audio alone
    assert {resampled.versions[s] != base.versions[s] for s in framed} == {True}
    assert resampled.versions["speech"] == base.versions["speech"]
    assert base.reusable(base.versions) == frozenset({"ocr", "labels", "qr", "fingerprint"})


async def test_without_chunk_checkpoints_nothing_is_persisted_per_chunk(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    path = write_video(root / "plain.mp4", [Scene(("PLAIN",), 2.0)], fps=10, size=(320, 240))
    plain = config.model_copy(
        update={"runtime": config.runtime.model_copy(update={"chunk_checkpoints": False})}
    )
    objects = root / "objects-plain"
    work = VideoProcessor(
        store=store,
        executor=executor,
        results=results,
        chunks=ChunkStore(LocalObjectStore(str(objects))),
        lineage=Pipeline.from_config(plain).lineage,
        settings=plain.runtime,
    )
    ref = VideoRef("plain", path.as_uri())
    task = asyncio.create_task(work.process(ref))
    while not task.done():
        assert not objects.exists() or not list(objects.rglob("*.json"))
        assert await store.chunks_done("plain") == set()
        await asyncio.sleep(0.02)
    await task
    status = await store.get("plain")
    assert status is not None
    assert status.status is VideoState.DONE
    assert status.frames == 4
    assert status.chunks_processed == 0
    assert sum(frame_keys(config, "plain").values()) == 4


class _Watched(LocalExecutor):
    """The real executor, noting what each ingest stream yields, in order."""

    def __init__(self, config: ServiceConfig) -> None:
        super().__init__(config)
        self.seen: list[tuple[str, str]] = []

    async def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        inline: Collection[str] = (),
        speech_from: int | None = None,
    ) -> AsyncIterator[IngestItem]:
        async for item in super().ingest(ref, resume, inline, speech_from):
            if not isinstance(item, SpeechPart | SpeechEnd):
                kind = "video" if isinstance(item, LocalVideo) else "last" if item.last else "chunk"
                self.seen.append((ref.video_id, kind))
            yield item


@pytest.mark.parametrize("decoding", [0, 1])
async def test_videos_decoding_limits_decoders_not_videos_in_flight(
    root: Path, config: ServiceConfig, store: RedisCheckpointStore, decoding: int
) -> None:
    limited = config.model_copy(
        update={"runtime": config.runtime.model_copy(update={"videos_decoding": decoding})}
    )
    executor, results = _Watched(limited), LocalResults(limited)
    work = VideoProcessor(
        store=store,
        executor=executor,
        results=results,
        chunks=ChunkStore(LocalObjectStore(limited.storage.object_store_uri)),
        lineage=Pipeline.from_config(limited).lineage,
        settings=limited.runtime,
    )
    refs = text_videos(root, (f"{name}-{decoding}" for name in ("first", "second")))
    try:
        await asyncio.gather(*(work.process(ref) for ref in refs))
    finally:
        await executor.close()
        await results.close()
    assert [status.frames for status in await all_done(store, refs)] == [8, 8]
    opened = sorted(refs, key=lambda ref: executor.seen.index((ref.video_id, "video")))
    first, second = (ref.video_id for ref in opened)
    first_decoded = executor.seen.index((first, "last"))
    second_opened = executor.seen.index((second, "video"))
    if decoding:  # the second video opened once the first had decoded its last chunk
        assert second_opened > first_decoded
    else:  # both at once
        assert second_opened < first_decoded


def test_the_done_message_stays_small_whatever_the_video_holds() -> None:
    """400 lines of text: the message carries the first 1000 characters, the counts and where
    the whole result is; a video with little text gets all of it."""
    texts = [f"line {i} " + "x" * 60 for i in range(400)]
    full = make_result("vid-1", frames=400, texts=texts, tenant="acme", embed=False)
    data = done_message_data(full)
    assert data["text"] == full.text[:DONE_TEXT_CHARS]
    assert data["text_truncated"] is True
    assert (data["text_lines"], data["text_chars"]) == (400, len(full.text))
    assert data["result"] == {
        "status": "/v1/videos/vid-1",
        "api": "/v1/videos/vid-1/result",
        "document": document_key("acme", "vid-1", full.pipeline_version),
    }
    assert data["shots"] == 1  # no boundary: one shot
    assert len(json.dumps(data)) < 2 * DONE_TEXT_CHARS
    small = make_result("vid-2", frames=2, embed=False)
    data = done_message_data(small)
    assert (data["text"], data["text_truncated"], data["text_lines"]) == (small.text, False, 2)


async def running(store: RedisCheckpointStore, video_id: str, epoch: int = 1) -> None:
    """Until attempt ``epoch`` at the video runs and has recorded a chunk."""
    while True:
        status = await store.get(video_id)
        if status and status.epoch == epoch and status.chunks_processed:
            return
        await asyncio.sleep(0.05)


async def test_an_owner_with_a_live_lease_keeps_its_video(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    """The partition's new owner meets the video while the member expelled from the group
    (a zombie) still works on it: it waits instead of taking it over, and commits only once
    the zombie has finished it."""
    scenes = [Scene((f"HELD {i}",), 1.0) for i in range(6)]
    ref = VideoRef("held", write_video(root / "held.mp4", scenes, fps=10, size=(320, 240)).as_uri())
    zombie = asyncio.create_task(
        processor(config, executor, results, store, instance_id="zombie").process(ref)
    )
    await running(store, "held")

    await processor(config, executor, results, store, instance_id="next").process(ref)

    assert zombie.done()  # the next owner returned only once the video was done
    await zombie
    status = await store.get("held")
    assert status is not None
    assert (status.status, status.attempts, status.owner) == (VideoState.DONE, 1, "zombie")
    keys = frame_keys(config, "held")
    assert sum(keys.values()) == status.frames == 12
    assert max(keys.values()) == 1


async def test_a_frozen_owner_loses_its_video_and_leaves_it_to_the_new_one(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    """An owner that stopped renewing (frozen past its lease) is taken over; when it wakes,
    its next fenced write stops its attempt, and it waits for the new owner to settle the
    video instead of writing or committing anything of its own."""
    scenes = [Scene((f"FROZEN {i}",), 1.0) for i in range(6)]
    path = write_video(root / "frozen.mp4", scenes, fps=10, size=(320, 240))
    ref = VideoRef("frozen", path.as_uri())
    # A lease it renews only every 200 s: no renewal can undo the lapse made below before
    # the new owner claims, whatever the machine's load.
    old = asyncio.create_task(
        processor(config, executor, results, store, instance_id="old", lease_s=600.0).process(ref)
    )
    await running(store, "frozen")
    await store._redis.hset(store.video_key("frozen"), "lease_until", 0)  # its lease lapsed

    new = asyncio.create_task(
        processor(config, executor, results, store, instance_id="new", lease_s=3.0).process(ref)
    )
    await asyncio.wait_for(old, timeout=60)
    settled = await store.get("frozen")  # when the old owner gave the video up
    await new

    assert settled is not None
    assert settled.status is VideoState.DONE
    status = await store.get("frozen")
    assert status is not None
    assert (status.status, status.attempts, status.owner) == (VideoState.DONE, 2, "new")
    keys = frame_keys(config, "frozen")
    assert sum(keys.values()) == status.frames == 12
    assert max(keys.values()) == 1


async def test_an_object_store_outage_uses_up_no_attempt(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    """The object store is down for longer than every attempt's backoff together: the video
    waits it out (within ``outage_window_s``) and is done, not failed for it."""
    moto = moto_server(root / "moto-outage").start()
    settings = StorageSettings(
        s3_endpoint_url=f"http://127.0.0.1:{moto.port}",
        s3_access_key_id=SecretStr("testing"),
        s3_secret_access_key=SecretStr("testing"),
        s3_connect_timeout_s=1.0,
        s3_max_attempts=1,
    )
    try:
        s3_client(settings).create_bucket(Bucket="chunks")
        moto.stop()  # down before the first chunk is stored
        path = write_video(root / "outage.mp4", [Scene(("WAIT",), 2.0)], fps=10, size=(320, 240))
        work = processor(
            config,
            executor,
            results,
            store,
            chunks=S3ObjectStore("chunks", "", s3_client(settings)),
            max_attempts=2,
            retry_backoff_s=(0.2,),
            outage_window_s=120.0,
        )
        task = asyncio.create_task(work.process(VideoRef("outage", path.as_uri())))
        await asyncio.sleep(4.0)  # 2 attempts with 0.2 s between them ended long ago
        assert not task.done()
        status = await store.get("outage")
        assert status is not None
        assert status.status is VideoState.RUNNING
        moto.start()
        s3_client(settings).create_bucket(Bucket="chunks")  # moto keeps nothing over a restart
        await asyncio.wait_for(task, timeout=120)
    finally:
        moto.stop()
    status = await store.get("outage")
    assert status is not None
    assert status.status is VideoState.DONE, status.error_message


async def test_credentials_refused_by_the_object_store_use_up_no_attempt(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    """The store refuses the service's key (AccessDenied from a real S3 endpoint enforcing
    IAM, as while a rotated key or policy propagates) for longer than every attempt's backoff
    together: the video waits it out as an outage and is done once access is back, its chunks
    kept, not failed for it."""
    moto = moto_server(root / "moto-denied")
    moto.env["INITIAL_NO_AUTH_ACTION_COUNT"] = "6"  # the setup below; then every call is checked
    moto.start()
    endpoint = {"endpoint_url": f"http://127.0.0.1:{moto.port}", "region_name": "us-east-1"}
    try:
        anyone = {"aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
        iam = boto3.client("iam", **endpoint, **anyone)
        keys = {}
        for user in ("admin", "service"):
            iam.create_user(UserName=user)
            keys[user] = iam.create_access_key(UserName=user)["AccessKey"]
        iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=_ALLOW_ALL)

        def as_user(user: str, service: str) -> Any:
            key = keys[user]
            return boto3.client(
                service,
                **endpoint,
                aws_access_key_id=key["AccessKeyId"],
                aws_secret_access_key=key["SecretAccessKey"],
            )

        as_user("admin", "s3").create_bucket(Bucket="chunks-denied")
        service_s3 = as_user("service", "s3")  # no policy yet: every call is AccessDenied
        path = write_video(root / "denied.mp4", [Scene(("WAIT",), 2.0)], fps=10, size=(320, 240))
        work = processor(
            config,
            executor,
            results,
            store,
            chunks=S3ObjectStore("chunks-denied", "", service_s3),
            max_attempts=2,
            retry_backoff_s=(0.2,),
            outage_window_s=120.0,
        )
        task = asyncio.create_task(work.process(VideoRef("denied", path.as_uri())))
        await asyncio.sleep(4.0)  # 2 attempts with 0.2 s between them ended long ago
        assert not task.done()
        status = await store.get("denied")
        assert status is not None
        assert status.status is VideoState.RUNNING
        as_user("admin", "iam").put_user_policy(
            UserName="service", PolicyName="s3", PolicyDocument=_ALLOW_ALL
        )
        await asyncio.wait_for(task, timeout=120)
    finally:
        moto.stop()
    status = await store.get("denied")
    assert status is not None
    assert status.status is VideoState.DONE, status.error_message


_ALLOW_ALL = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
)


async def test_a_renewal_after_the_attempt_recorded_its_outcome_stops_nothing(
    store: RedisCheckpointStore,
) -> None:
    """Renewals go on until the block ends; one that comes after the attempt marked the video
    done finds it no longer running. That is the attempt's own doing, not a takeover: the
    block is not cancelled and no ``StaleEpoch`` comes out of it."""
    ref = VideoRef("finished-early", "file:///videos/finished-early.mp4")
    await store.mark_queued(ref, "pv")
    claim = await store.claim(ref, "pv", owner="me", lease_s=0.3)
    outbox = OutboxEvent(
        type="video.done",
        video_id=ref.video_id,
        tenant=ref.tenant,
        pipeline_version="pv",
        timestamp=datetime.now(UTC),
    )
    async with holding(store, ref.video_id, claim.epoch, lease_s=0.3):  # renewed every 0.1 s
        await store.mark_done(ref.video_id, claim.epoch, frames=0, timings={}, outbox=outbox)
        await asyncio.sleep(0.6)  # several renewals find it done meanwhile
    status = await store.get(ref.video_id)
    assert status is not None
    assert (status.status, status.epoch) == (VideoState.DONE, claim.epoch)


async def test_an_attempt_silent_past_stall_s_is_stopped_and_lets_its_video_go(
    store: RedisCheckpointStore,
) -> None:
    """The lease is renewed only while the attempt beats: one that beats keeps its video from
    another owner; one silent for ``stall_s`` (a stage that never answers) is cancelled with
    ``AttemptStalled`` and its lease let go, so the next owner claims the video at once."""
    ref = VideoRef("hangs", "file:///videos/hangs.mp4")
    await store.mark_queued(ref, "pv")
    claim = await store.claim(ref, "pv", owner="me", lease_s=0.6)
    heartbeat = Heartbeat()

    async def beating() -> None:
        for _ in range(10):  # 2 s, past stall_s, but never silent that long
            heartbeat.beat()
            await asyncio.sleep(0.2)
        with pytest.raises(VideoBusy):
            await store.claim(ref, "pv", owner="other", lease_s=0.6)
        await asyncio.sleep(30)  # then it hangs

    with pytest.raises(AttemptStalled) as stalled:
        async with holding(
            store, ref.video_id, claim.epoch, lease_s=0.6, heartbeat=heartbeat, stall_s=1.0
        ):
            await asyncio.wait_for(beating(), timeout=20)
    assert stalled.value.code == "attempt_stalled"
    assert isinstance(stalled.value, RetryableError)
    taken = await store.claim(ref, "pv", owner="other", lease_s=0.6)  # no wait for a lapse
    assert taken.epoch == claim.epoch + 1


async def test_a_claimant_waits_for_a_live_owner_only_so_long(
    store: RedisCheckpointStore,
) -> None:
    ref = VideoRef("held-long", "file:///videos/held-long.mp4")
    await store.mark_queued(ref, "pv")
    await store.claim(ref, "pv", owner="live", lease_s=30)
    started = asyncio.get_running_loop().time()
    with pytest.raises(VideoBusy):
        await claim_when_free(store, ref, "pv", owner="me", lease_s=30, lost=None, wait_s=0.5)
    assert asyncio.get_running_loop().time() - started < 25  # gave up, not waited out the lease
