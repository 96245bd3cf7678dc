"""Speech through the per-video orchestration (LocalExecutor, real Whisper tiny.en, real
Redis, Lance and object store): recognised beside the frames, resumed after the last window
persisted, recorded as failed without failing the video when the audio is corrupt, added to a
done video without decoding a frame, and taken from an earlier result when only other stages
changed. What is heard and read is searchable before its video is done (partial results)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Collection, Sequence
from pathlib import Path
from typing import Any

import av
import httpx
import lance
import numpy as np
import pytest
from rich.console import Console

from api.app import create_app
from checkpoint.base import VideoState, VideoStatus
from checkpoint.chunk_store import ChunkStore, chunk_origin
from checkpoint.redis_store import RedisCheckpointStore
from core.config import OcrSettings, ServiceConfig
from core.records import Chunk, VideoRef, VideoResult
from core.search import SearchFilter, SegmentHit
from core.speech import SpeechPart
from devkit.progress_view import progress_table
from devkit.samples import Scene, write_video
from devkit.speech_videos import espeak_path, speak_over
from models.embedding import text_embedder
from runtime.executor import IngestItem, PooledChunk
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from sinks.lance import LanceFrameSink
from sinks.object_store import document_key
from sinks.search import LanceSearchIndex
from stages.errors import DecodeError
from stages.pipeline import Pipeline
from stages.sampling import ResumePoint
from storage.local import LocalObjectStore
from tests.runtime.support import processor

pytestmark = pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")

SCRIPT = (
    (0.5, "The invoice is ready for the customer."),
    (5.0, "Please open the server room now."),
    (9.5, "Thank you for watching this video."),
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("speech")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"speech-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        stages={"sample_fps": 1.0, "chunk_frames": 4},
        asr={"window_s": 3.0},  # 5 windows in 14 s: room to stop between them
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


@pytest.fixture(scope="module")
def spoken(root: Path) -> Path:
    """14 s with a caption on screen and three sentences spoken."""
    scenes = [Scene(("INVOICE READY",), 7.0), Scene(("SERVER ROOM",), 7.0)]
    base = write_video(root / "captions.mp4", scenes, fps=10, size=(320, 240))
    speak_over(base, SCRIPT, root / "spoken.mp4", root)
    return root / "spoken.mp4"


@pytest.fixture(scope="module")
def executor(config: ServiceConfig) -> Watched:
    return Watched(config)


@pytest.fixture(scope="module")
def results(config: ServiceConfig) -> WatchedResults:
    return WatchedResults(config)


class Watched(LocalExecutor):
    """The real executor, noting where each ingest stream was asked to start, and how many
    chunks went to the image stages and the embedder. With ``stall_after`` set, a stream
    hangs (as in a process that died) once that many windows' speech has been taken."""

    def __init__(self, config: ServiceConfig) -> None:
        super().__init__(config)
        self.asked: list[tuple[str, ResumePoint | None, int | None]] = []
        self.analysed = 0
        self.embedded = 0
        self.stall_after: int | None = None
        self.stalled = asyncio.Event()
        self.refuse_from_chunk: int | None = None  # chunks from this index on are rejected

    async def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        inline: Collection[str] = (),
        speech_from: int | None = None,
    ) -> AsyncIterator[IngestItem]:
        self.asked.append((ref.video_id, resume, speech_from))
        heard = 0
        async for item in super().ingest(ref, resume, inline, speech_from):
            yield item
            heard += isinstance(item, SpeechPart)
            if heard == self.stall_after:  # the caller has taken (and persisted) them
                self.stalled.set()
                await asyncio.Event().wait()

    async def analyse(self, stage: str, ticket: PooledChunk) -> Chunk:
        self.analysed += 1
        if self.refuse_from_chunk is not None and ticket.index >= self.refuse_from_chunk:
            raise DecodeError(f"chunk {ticket.index} is unreadable")
        return await super().analyse(stage, ticket)

    async def embed(self, chunk: Chunk) -> Chunk:
        self.embedded += 1
        return await super().embed(chunk)


class WatchedResults(LocalResults):
    """The real result store, noting the video of each partial result written."""

    def __init__(self, config: ServiceConfig) -> None:
        super().__init__(config)
        self.parts: list[str] = []

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        self.parts += [part.ref.video_id for part in parts]
        await super().write_partial(parts)


def with_asr(config: ServiceConfig, **changes: object) -> ServiceConfig:
    return config.model_copy(update={"asr": config.asr.model_copy(update=changes)})


async def done(
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
    ref: VideoRef,
) -> dict[str, Any]:
    """Process ``ref`` to done; its result document."""
    await processor(config, executor, results, store).process(ref)
    status = await store.get(ref.video_id)
    assert status is not None
    assert status.status is VideoState.DONE, status
    key = document_key(ref.tenant, ref.video_id, Pipeline.from_config(config).version)
    document: dict[str, Any] = json.loads((Path(config.storage.object_store_uri) / key).read_text())
    return document


def words(document: dict[str, Any]) -> list[str]:
    speech = document["speech"]
    return [w["text"].strip(".,").lower() for s in speech["segments"] for w in s["words"]]


def timed_words(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each segment's text and times, and its words': what a resume must give back (the
    model's probabilities may differ in their last digits with the threads it ran on)."""
    return [
        (
            s["text"],
            s["start_s"],
            s["end_s"],
            [(w["text"], w["start_s"], w["end_s"]) for w in s["words"]],
        )
        for s in document["speech"]["segments"]
    ]


def speech_objects(config: ServiceConfig, video_id: str) -> list[Path]:
    return sorted(
        (Path(config.storage.object_store_uri) / "chunks" / video_id).rglob("speech-*.json")
    )


async def test_speech_is_recognised_beside_the_frames(
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
    spoken: Path,
) -> None:
    ref = VideoRef("talk", spoken.as_uri())
    document = await done(config, executor, results, store, ref)

    speech = document["speech"]
    assert speech["status"] == "done"
    assert speech["language"] == "en"
    assert speech["error"] is None
    heard = words(document)
    for expected in ("invoice", "customer", "server", "room", "watching"):
        assert expected in heard
    # Each sentence is heard where it is spoken (segments on the video's timeline).
    starts = [s["start_s"] for s in speech["segments"]]
    for spoken_at, _ in SCRIPT:
        assert min(abs(start - spoken_at) for start in starts) < 1.0, (spoken_at, starts)
    assert len(document["frames"]) == 14
    assert document["timings"]["speech"] > 0

    rows = lance.dataset(f"{config.storage.lance_uri}/segments.lance").to_table(
        filter="video_id = 'talk' AND kind = 'speech'"
    )
    assert rows.num_rows == len(speech["segments"])
    assert sorted(rows["text"].to_pylist()) == sorted(s["text"] for s in speech["segments"])
    status = await store.get("talk")
    assert status is not None
    progress = status.stages["speech"]
    # 14 s in windows of 3 s at most, each ending where the speech pauses.
    assert progress.done == progress.total >= 5
    assert speech_objects(config, "talk") == []  # removed with the chunks once done


async def test_a_crash_resumes_speech_after_its_last_persisted_window(
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
    spoken: Path,
) -> None:
    ref = VideoRef("talk-again", spoken.as_uri())
    executor.stall_after = 2
    try:
        first = asyncio.create_task(processor(config, executor, results, store).process(ref))
        await asyncio.wait_for(executor.stalled.wait(), timeout=120)
        first.cancel()  # the process dies there
        await asyncio.gather(first, return_exceptions=True)
    finally:
        executor.stall_after = None
    parts, end = ChunkStore(LocalObjectStore(config.storage.object_store_uri)).speech(
        ref.video_id, Pipeline.from_config(config).version, chunk_origin(ref)
    )
    assert end is None
    persisted = len(parts)
    assert persisted == 2

    document = await done(config, executor, results, store, ref)

    video_id, _, speech_from = executor.asked[-1]
    assert video_id == ref.video_id
    assert speech_from == persisted  # only the windows after them are recognised
    clean = json.loads(
        (
            Path(config.storage.object_store_uri)
            / document_key("default", "talk", Pipeline.from_config(config).version)
        ).read_text()
    )
    assert timed_words(document) == timed_words(clean)


def corrupt_audio(source: Path, out: Path) -> Path:
    """``source`` with its audio packets from about 6 s on overwritten with noise."""
    with av.open(str(source)) as container:
        rate = container.streams.audio[0].sample_rate
        packets = [
            (p.pos, p.size)
            for p in container.demux(audio=0)
            if p.pos is not None and p.pts is not None and p.pts / rate > 6.0
        ]
    data = bytearray(source.read_bytes())
    rng = np.random.default_rng(5)
    for pos, size in packets[:60]:
        data[pos : pos + size] = rng.bytes(size)
    out.write_bytes(bytes(data))
    return out


async def test_corrupt_audio_fails_the_speech_not_the_video(
    root: Path,
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
    spoken: Path,
) -> None:
    broken = corrupt_audio(spoken, root / "broken.mp4")
    document = await done(config, executor, results, store, VideoRef("broken", broken.as_uri()))

    speech = document["speech"]
    assert speech["status"] == "failed"
    assert speech["error"]["code"] == "audio_decode_error"
    assert "audio" in speech["error"]["message"]
    assert "invoice" in words(document)  # what came before the damage is kept
    assert len(document["frames"]) == 14  # the frames' work is all there


async def test_a_video_without_audio_has_no_speech(
    root: Path,
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
) -> None:
    path = write_video(root / "mute.mp4", [Scene(("MUTE",), 2.0)], fps=10, size=(320, 240))
    document = await done(config, executor, results, store, VideoRef("mute", path.as_uri()))
    assert document["speech"]["status"] == "no_audio"
    assert document["speech"]["segments"] == []

    # Its speech stage is not applicable, not 0 of unknown windows: in the checkpoint record,
    # in the progress API's answer and in the terminal's progress table.
    status = await store.get("mute")
    assert status is not None
    assert status.stages["speech"].applicable is False
    assert all(p.applicable for stage, p in status.stages.items() if stage != "speech")
    app = create_app(store, tokens={})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://api") as api:
        answer = await api.get("/v1/videos/mute")
    assert answer.status_code == 200
    assert answer.json()["stages"]["speech"] == {"done": 0, "total": 0, "applicable": False}
    console = Console(file=io.StringIO(), width=240, record=True)
    console.print(progress_table([VideoStatus.model_validate(answer.json())]))
    (row,) = [line for line in console.export_text().splitlines() if "mute" in line]
    assert row.count("n/a") == 1  # speech's cell; every other stage is done
    assert "?" not in row


async def test_speech_added_to_a_done_video_runs_alone(
    config: ServiceConfig, store: RedisCheckpointStore, spoken: Path
) -> None:
    ref = VideoRef("late-speech", spoken.as_uri())
    without = with_asr(config, enabled=False)
    silent_run, silent_run_results = Watched(without), LocalResults(without)
    try:
        before = await done(without, silent_run, silent_run_results, store, ref)
    finally:
        await silent_run.close()
        await silent_run_results.close()
    assert before["speech"] is None
    rows_before = LanceFrameSink(config.storage.lance_uri).frame_rows(
        ref.video_id, with_embedding=True
    )

    again, again_results = Watched(config), LocalResults(config)
    try:
        after = await done(config, again, again_results, store, ref)
    finally:
        await again.close()
        await again_results.close()
    ((_, resume, speech_from),) = again.asked
    assert resume is not None
    assert resume.finished  # fetched for its audio, nothing decoded
    assert speech_from == 0
    assert again.analysed == again.embedded == 0
    assert after["speech"]["status"] == "done"
    assert "invoice" in words(after)
    assert [(f["timestamp_s"], f["ocr_text"]) for f in after["frames"]] == [
        (f["timestamp_s"], f["ocr_text"]) for f in before["frames"]
    ]
    # The frames' embeddings are the first run's, taken from the frames table.
    embedded = {
        row["frame_index"]: row["embedding"]
        for row in LanceFrameSink(config.storage.lance_uri).frame_rows(
            ref.video_id, with_embedding=True
        )
    }
    assert len(embedded) == len(before["frames"])
    assert all(vector is not None for vector in embedded.values())
    assert {row["pipeline_version"] for row in rows_before} == {before["pipeline_version"]}
    for row in rows_before:
        assert np.allclose(row["embedding"], embedded[row["frame_index"]])


async def test_speech_is_taken_from_the_earlier_result_when_other_stages_change(
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
    spoken: Path,
) -> None:
    ref = VideoRef("keep-speech", spoken.as_uri())
    first = await done(config, executor, results, store, ref)
    stricter = config.model_copy(
        update={"stages": config.stages.model_copy(update={"ocr": OcrSettings(min_score=0.6)})}
    )
    rerun, rerun_results = Watched(stricter), LocalResults(stricter)
    try:
        second = await done(stricter, rerun, rerun_results, store, ref)
    finally:
        await rerun.close()
        await rerun_results.close()
    ((_, _, speech_from),) = rerun.asked
    assert speech_from is None  # nothing recognised again
    assert rerun.analysed > 0  # OCR ran again
    assert second["speech"] == first["speech"]
    assert second["pipeline_version"] != first["pipeline_version"]


async def found(
    config: ServiceConfig,
    query: str,
    video_id: str,
    *,
    partial: bool,
    kind: str | None = None,
    timeout_s: float = 60.0,
) -> SegmentHit:
    """The first hit of ``query`` in the video with that partial flag (and of that kind),
    once there is one: speech and on-screen text reach the index in separate writes."""
    index = LanceSearchIndex.from_settings(config.storage, text_embedder(config.stages.embed.model))
    deadline = asyncio.get_running_loop().time() + timeout_s
    where = SearchFilter(video_id=video_id)
    while True:
        hits = await asyncio.to_thread(index.search, query, k=3, where=where, method="text")
        hit = next((h for h in hits if h.partial is partial and kind in (None, *h.kinds)), None)
        if hit is not None:
            return hit
        assert asyncio.get_running_loop().time() < deadline, (query, hits)
        await asyncio.sleep(0.1)


def search_rows(config: ServiceConfig, video_id: str) -> list[dict[str, Any]]:
    index = LanceSearchIndex.from_settings(config.storage, text_embedder(config.stages.embed.model))
    columns = ["kind", "segment", "text", "start_s", "partial"]
    return index.table.rows(filter=f"video_id = '{video_id}'", columns=columns)


async def test_text_and_speech_are_searchable_before_the_video_is_done(
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
    spoken: Path,
) -> None:
    ref = VideoRef("findable", spoken.as_uri())
    executor.stall_after = 2  # two windows of speech heard, then the process hangs
    try:
        first = asyncio.create_task(processor(config, executor, results, store).process(ref))
        await asyncio.wait_for(executor.stalled.wait(), timeout=120)
        sign = await found(config, "invoice ready", "findable", partial=True, kind="text")
        said = await found(config, "customer", "findable", partial=True, kind="speech")
        status = await store.get("findable")
        assert status is not None
        assert status.status is VideoState.RUNNING  # found long before the video is done
        first.cancel()  # the process dies there
        await asyncio.gather(first, return_exceptions=True)
    finally:
        executor.stall_after = None
    # The sign's span; when the sentence said over it was written by the time of the search,
    # the two overlap and come back as one hit of both kinds (`` · `` between their texts).
    assert "INVOICE READY" in sign.text.split(" · ")
    assert "text" in sign.kinds
    assert said.kinds == ("speech",)
    assert "customer" in said.text
    assert said.start_s == pytest.approx(SCRIPT[0][0], abs=1.0)

    # A new attempt finishes it: every row final, each segment once, as the video has them.
    document = await done(config, executor, results, store, ref)
    rows = search_rows(config, "findable")
    assert [r for r in rows if r["partial"]] == []
    assert len({r["segment"] for r in rows}) == len(rows)
    spans = {(r["text"], r["start_s"]) for r in rows if r["kind"] == "text"}
    assert spans == {("INVOICE READY", 0.0), ("SERVER ROOM", 7.0)}
    spoken_rows = sorted(r["text"] for r in rows if r["kind"] == "speech")
    assert spoken_rows == sorted(s["text"].strip() for s in document["speech"]["segments"])
    assert (await found(config, "server room", "findable", partial=False)).start_s == 7.0


async def test_a_video_done_before_its_parts_are_due_writes_none(
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
    spoken: Path,
) -> None:
    ref = VideoRef("quick", spoken.as_uri())
    await processor(config, executor, results, store, partial_results_every_s=600).process(ref)
    status = await store.get("quick")
    assert status is not None
    assert status.status is VideoState.DONE
    assert "quick" not in results.parts  # its parts were held, then not needed
    rows = search_rows(config, "quick")
    assert {r["kind"] for r in rows} == {"text", "speech", "chapter"}  # its one chapter
    assert [r for r in rows if r["partial"]] == []


async def test_a_failed_video_leaves_no_partial_rows(
    config: ServiceConfig,
    executor: Watched,
    results: WatchedResults,
    store: RedisCheckpointStore,
    spoken: Path,
) -> None:
    ref = VideoRef("unreadable-end", spoken.as_uri())
    executor.refuse_from_chunk = 2  # the first two chunks are analysed, the third refused
    try:  # each part written at once, before the failure
        await processor(config, executor, results, store, partial_results_every_s=0).process(ref)
    finally:
        executor.refuse_from_chunk = None
    status = await store.get("unreadable-end")
    assert status is not None
    assert status.status is VideoState.FAILED
    assert status.error_code == "decode_error"
    assert results.parts.count("unreadable-end") >= 2  # chunks and speech before the failure
    # The removal is queued to the writer with the failure; it lands at once.
    deadline = asyncio.get_running_loop().time() + 30
    while rows := search_rows(config, "unreadable-end"):
        assert asyncio.get_running_loop().time() < deadline, rows
        await asyncio.sleep(0.1)
