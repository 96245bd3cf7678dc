"""Stages from another package (``tests/plugins``, found through its ``reelsense.stages`` entry
points) through the per-video orchestration (LocalExecutor), with no project file naming them:
a frames stage's output stored with each sample, a video stage's segments stored, searchable
and taken back when the video is processed again, a failing video stage failing its video
alone, with the stage named."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from checkpoint.base import VideoState, VideoStatus
from checkpoint.redis_store import RedisCheckpointStore
from core.config import OcrSettings, ServiceConfig
from core.records import VideoRef
from core.search import SearchFilter
from devkit.samples import Scene, write_video
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from sinks.lance import LanceFrameSink
from sinks.object_store import document_key
from sinks.segments import LanceSegmentSink
from stages.decode import FRAMES_DECODED
from stages.pipeline import Pipeline
from stages.registry import installed
from storage.local import LocalObjectStore
from tests.runtime.support import processor

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
BLUE = (20, 30, 60)


@pytest.fixture(scope="module", autouse=True)
def plugins_installed() -> Iterator[None]:
    """The plug-in package importable, as ``pip install`` would leave it."""
    sys.path.insert(0, str(PLUGINS))
    installed.cache_clear()
    yield
    sys.path.remove(str(PLUGINS))
    installed.cache_clear()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plugin-stages")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"plug-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        stages={"sample_fps": 2.0, "chunk_frames": 2, "plugins": {"colour": {}}},
        asr={"enabled": False},
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


def with_plugins(config: ServiceConfig, **plugins: dict[str, Any]) -> ServiceConfig:
    stages = config.stages.model_copy(update={"plugins": {**config.stages.plugins, **plugins}})
    return config.model_copy(update={"stages": stages})


def white_then_blue(root: Path, name: str) -> VideoRef:
    scenes = [Scene((f"{name.upper()} ONE",), 1.0), Scene(("TWO",), 1.0, background=BLUE)]
    path = write_video(root / f"{name}.mp4", scenes, fps=10, size=(320, 240))
    return VideoRef(name, path.as_uri())


async def run(config: ServiceConfig, store: RedisCheckpointStore, *refs: VideoRef) -> int:
    """Processes ``refs``; the frames decoded for them."""
    executor, results = LocalExecutor(config), LocalResults(config)
    decoded = FRAMES_DECODED.count
    try:
        work = processor(config, executor, results, store)
        for ref in refs:
            await work.process(ref)
    finally:
        await executor.close()
        await results.close()
    return FRAMES_DECODED.count - decoded


async def settled(store: RedisCheckpointStore, video_id: str, state: VideoState) -> VideoStatus:
    """The video's record, asserted in ``state``."""
    status = await store.get(video_id)
    assert status is not None, video_id
    assert status.status is state, status
    return status


def document(config: ServiceConfig, ref: VideoRef, version: str) -> dict[str, Any]:
    objects = LocalObjectStore(config.storage.object_store_uri)
    stored = objects.get_bytes(document_key(ref.tenant, ref.video_id, version))
    assert stored is not None, (ref.video_id, version)
    raw: dict[str, Any] = json.loads(stored)
    return raw


async def test_a_frames_and_a_video_stage_of_another_package_fill_the_result(
    root: Path, config: ServiceConfig, store: RedisCheckpointStore
) -> None:
    ref = white_then_blue(root, "plain")
    both = with_plugins(config, colour_runs={})
    assert await run(both, store, ref) > 0
    status = await settled(store, ref.video_id, VideoState.DONE)
    # Progress and timings name both stages, as they name the service's own.
    assert status.stages["colour"].done == status.chunks_total
    assert (status.stages["colour_runs"].done, status.stages["colour_runs"].total) == (1, 1)
    assert "colour_runs" in status.timings

    doc = document(both, ref, status.pipeline_version)
    colours = [frame["extras"]["colour"] for frame in doc["frames"]]
    assert (colours[0], colours[-1]) == ("white", "blue"), colours
    runs = doc["outputs"]["colour_runs"]
    assert runs["data"] == {"runs": 2}
    assert [(s["text"], s["start_s"], s["end_s"]) for s in runs["segments"]] == [
        ("white screen", 0.0, 1.0),
        ("blue screen", 1.0, 2.0),
    ]
    assert all(s["searchable"] for s in runs["segments"])
    assert {"colour", "colour_runs"} <= set(doc["stage_versions"])

    # The frames table holds each sample's, as JSON beside the service's own columns.
    stored = LanceFrameSink(both.storage.lance_uri).frame_rows(ref.video_id)
    assert [json.loads(row["extras"])["colour"] for row in stored] == colours
    # The segments table holds them by their kind; search finds them by it.
    rows = LanceSegmentSink(both.storage.lance_uri).segment_rows(ref.video_id, "colour_run")
    assert [row["text"] for row in rows] == ["white screen", "blue screen"]
    from api.search import SegmentSearch

    search = SegmentSearch.from_config(both)
    hits = await search("blue", 5, SearchFilter(kinds=("colour_run",)), "text")
    assert [(h.video_id, h.kinds, h.start_s, h.text) for h in hits] == [
        (ref.video_id, ("colour_run",), 1.0, "blue screen")
    ]


async def test_a_video_stage_added_to_finished_videos_decodes_nothing(
    root: Path, config: ServiceConfig, store: RedisCheckpointStore
) -> None:
    refs = [white_then_blue(root, f"done-{i}") for i in range(3)]
    assert await run(config, store, *refs) > 0
    before = {r.video_id: await settled(store, r.video_id, VideoState.DONE) for r in refs}

    added = with_plugins(config, colour_runs={"min_run_s": 0.5})
    assert await run(added, store, *refs) == 0  # from the stored results alone
    for ref in refs:
        status, earlier = await settled(store, ref.video_id, VideoState.DONE), before[ref.video_id]
        assert status.pipeline_version != earlier.pipeline_version
        doc = document(added, ref, status.pipeline_version)
        old = document(config, ref, earlier.pipeline_version)
        # Only the new stage is new: every other stage's version is what it was.
        assert {k: v for k, v in doc["stage_versions"].items() if k != "colour_runs"} == (
            old["stage_versions"]
        )
        assert [f["extras"] for f in doc["frames"]] == [f["extras"] for f in old["frames"]]
        assert doc["outputs"]["colour_runs"]["data"] == {"runs": 2}

    # Processed again for another reason (OCR's settings), a video takes the video stage's
    # output back (it reads only the colours): no time is spent on it.
    ocr = added.model_copy(
        update={"stages": added.stages.model_copy(update={"ocr": OcrSettings(min_score=0.6)})}
    )
    assert await run(ocr, store, refs[0]) > 0  # OCR needs the pixels again
    status = await settled(store, refs[0].video_id, VideoState.DONE)
    assert "ocr" in status.timings
    assert "colour_runs" not in status.timings
    versions = versions_of(ocr)
    assert versions["colour_runs"] == versions_of(added)["colour_runs"]

    # A new palette changes the colours, so the stage that reads them runs again.
    palette = with_plugins(ocr, colour={"palette": ["white", "blue", "black"]})
    assert versions_of(palette)["colour_runs"] != versions["colour_runs"]
    assert versions_of(palette)["ocr"] == versions["ocr"]
    await run(palette, store, refs[0])
    status = await settled(store, refs[0].video_id, VideoState.DONE)
    assert "colour_runs" in status.timings


def calls(stage: str, outcome: str) -> float:
    labels = {"stage": stage, "outcome": outcome}
    return REGISTRY.get_sample_value("reelsense_stage_chunks_total", labels) or 0.0


def versions_of(config: ServiceConfig) -> dict[str, str]:
    return dict(Pipeline.from_config(config).lineage.versions)


async def test_a_failing_video_stage_fails_its_video_alone_with_the_stage_named(
    root: Path, config: ServiceConfig, store: RedisCheckpointStore
) -> None:
    bad, good = white_then_blue(root, "bad"), white_then_blue(root, "good")
    failing = with_plugins(config, colour_runs={"fail_on": "bad"})
    before = {outcome: calls("colour_runs", outcome) for outcome in ("ok", "error")}
    await run(failing, store, bad, good)
    # Counted like the frames stages' calls: the failed one (each attempt) and the good one.
    assert calls("colour_runs", "ok") - before["ok"] == 1
    assert calls("colour_runs", "error") - before["error"] >= 1
    status = await settled(store, "bad", VideoState.FAILED)
    assert (status.error_code, status.stage) == ("stage_failed", "colour_runs")
    assert "asked to fail on this video" in (status.error_message or "")
    await settled(store, "good", VideoState.DONE)
