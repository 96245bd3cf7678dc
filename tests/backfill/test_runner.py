"""``reelsense backfill`` on Ray Data, as a user runs it (its own process, its own local Ray),
against a real Redis, Lance tables and the real stages: videos done once, the service's done
videos skipped, a corrupt one failed with its reason, a kill -9 midway resumed with nothing
doubled and no webhook twice, and a stage added to finished videos with no frame decoded."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import lance
import pytest
import redis
import yaml

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from devkit.speech_videos import espeak_path, speak_over
from devkit.workload import write_videos
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from sinks.lance import LanceSummarySink
from sinks.object_store import document_key
from stages.pipeline import Pipeline
from tests.runtime.support import processor

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("backfill-run")


@pytest.fixture(scope="module")
def videos(root: Path) -> dict[str, Path]:
    """Eight 4 s videos (4 chunks each at the settings below)."""
    return write_videos(root / "videos", 8, seconds_per_scene=2.0)


def service_config(root: Path, redis_url: str, name: str, **stages: Any) -> ServiceConfig:
    folder = root / name
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"bf-{name}-{root.name}"},
        storage={"lance_uri": str(folder / "lance"), "object_store_uri": str(folder / "o")},
        limits={"file_roots": (str(root),)},
        stages={"sample_fps": 2.0, "chunk_frames": 2, **stages},
        asr={"enabled": False},
        ray={"num_cpus": 2},
        runtime={"workdir": str(folder / "work"), "executor": "local", "lease_s": 3.0},
        backfill={"worker_cpus": 1.0},
    )


def config_file(config: ServiceConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(json.loads(config.to_replica_json())))
    return path


def manifest(path: Path, videos: dict[str, Path], extra: list[str] = ()) -> Path:  # type: ignore[assignment]
    lines = [json.dumps({"id": vid, "uri": p.as_uri()}) for vid, p in videos.items()]
    path.write_text("\n".join([*lines, *extra]) + "\n")
    return path


def backfill(config_path: Path, source: Path, *more: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "cli.main", "backfill", "--manifest", str(source)]
    argv += ["--config", str(config_path), "--json", "--workers", "2", *more]
    return subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # kill -9 takes its Ray with it (the process group)
        env={**os.environ, "RAY_TMPDIR": ""},
    )


def finished(run: subprocess.Popen[str], timeout: float = 600) -> tuple[int, dict[str, Any]]:
    output, _ = run.communicate(timeout=timeout)
    start = output.rfind("\n{\n")
    assert start >= 0, output[-4000:]
    return run.returncode, json.loads(output[start + 1 :])


def outbox_done(config: ServiceConfig) -> Counter[str]:
    """``video.done`` entries in the outbox (what the notifier turns into webhooks)."""
    client = redis.Redis.from_url(config.redis.url)
    try:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
            f"{config.redis.key_prefix}:outbox"
        )
    finally:
        client.close()
    events = [json.loads(fields[b"event"]) for _, fields in entries]
    return Counter(e["video_id"] for e in events if e["type"] == "video.done")


def frame_keys(config: ServiceConfig) -> list[tuple[str, int]]:
    table = lance.dataset(f"{config.storage.lance_uri}/frames.lance")
    rows = table.to_table(columns=["video_id", "frame_index"]).to_pylist()
    return [(row["video_id"], row["frame_index"]) for row in rows]


async def test_a_backfill_does_each_video_once_and_skips_what_the_service_did(
    root: Path, redis_url: str, videos: dict[str, Path]
) -> None:
    config = service_config(root, redis_url, "once")
    subset = dict(list(videos.items())[:3])
    # The service did the first one already.
    store = RedisCheckpointStore(config.redis)
    executor, results = LocalExecutor(config), LocalResults(config)
    try:
        first = next(iter(subset))
        work = processor(config, executor, results, store)
        await work.process(VideoRef(first, subset[first].as_uri()))
    finally:
        await executor.close()
        await results.close()
    corrupt = root / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(4000))
    source = manifest(
        root / "once.jsonl",
        subset,
        [json.dumps({"id": "broken", "uri": corrupt.as_uri()}), "{not json"],
    )
    path = config_file(config, root / "once.yaml")

    code, report = finished(backfill(path, source, "--notify"))
    assert code == 1, report  # a video failed
    assert report["done"] == 2
    assert report["already_done"] == 1
    assert [f["video_id"] for f in report["failures"]] == ["broken"]
    assert report["failures"][0]["reason"].startswith("invalid_video: not a readable video")
    assert report["skipped"] == 1
    assert report["skipped_entries"][0]["where"] == "once.jsonl:5"
    assert report["frames_decoded"] > 0
    for video_id in subset:
        status = await store.get(video_id)
        assert status is not None
        assert status.status is VideoState.DONE, status
    broken = await store.get("broken")
    assert broken is not None
    assert broken.status is VideoState.FAILED, broken
    assert broken.error_code
    assert broken.lane == "bulk"
    keys = frame_keys(config)
    assert len(keys) == len(set(keys))
    assert {vid for vid, _ in keys} == set(subset)
    # --notify: each video done by the backfill is announced once (the service's own too).
    assert outbox_done(config) == Counter(list(subset))

    # Run again: nothing to do, nothing decoded.
    code, again = finished(backfill(path, source))
    assert (again["done"], again["already_done"], again["frames_decoded"]) == (0, 3, 0)
    await store.close()


async def test_a_backfill_killed_midway_resumes_with_nothing_doubled(
    root: Path, redis_url: str, videos: dict[str, Path]
) -> None:
    config = service_config(root, redis_url, "killed")
    source = manifest(root / "killed.jsonl", videos)
    path = config_file(config, root / "killed.yaml")
    store = RedisCheckpointStore(config.redis)
    run = backfill(path, source, "--notify")
    deadline = time.monotonic() + 300
    states: list[VideoState | None] = []
    while time.monotonic() < deadline:  # kill once some are done and others under way
        states = [status.status if (status := await store.get(vid)) else None for vid in videos]
        if states.count(VideoState.DONE) >= 2 and VideoState.RUNNING in states:
            break
        assert run.poll() is None, run.communicate()[0][-4000:]
        await asyncio.sleep(0.2)
    else:
        pytest.fail(f"no moment with videos done and running: {states}")
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    done_before = states.count(VideoState.DONE)

    code, report = finished(backfill(path, source, "--notify"))
    assert code == 0, report
    assert report["done"] + report["already_done"] == len(videos)
    assert report["already_done"] >= done_before
    for video_id in videos:
        status = await store.get(video_id)
        assert status is not None
        assert status.status is VideoState.DONE, status
    keys = frame_keys(config)
    assert len(keys) == len(set(keys)), "a frame row is doubled"
    assert {vid for vid, _ in keys} == set(videos)
    summaries = LanceSummarySink(config.storage.lance_uri)
    assert all(summaries.video_row(vid) is not None for vid in videos)
    assert outbox_done(config) == Counter(list(videos)), "a video announced twice or never"
    await store.close()


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng is not installed")
async def test_speech_added_to_finished_videos_decodes_no_frame(
    root: Path, redis_url: str, videos: dict[str, Path]
) -> None:
    """The videos done without speech recognition; a backfill after it is turned on runs the
    speech stage alone: no frame is decoded, and (by default) nobody is notified."""
    spoken = {}
    for video_id, path in list(videos.items())[:2]:
        spoken[video_id] = root / f"spoken-{video_id}.mp4"
        speak_over(path, [(0.5, "The invoice is ready for the customer.")], spoken[video_id], root)
    source = manifest(root / "added.jsonl", spoken)
    before = service_config(root, redis_url, "added")
    code, first = finished(backfill(config_file(before, root / "added-1.yaml"), source))
    assert (code, first["done"]) == (0, 2), first
    assert first["frames_decoded"] > 0
    after = before.model_copy(update={"asr": before.asr.model_copy(update={"enabled": True})})
    code, added = finished(backfill(config_file(after, root / "added-2.yaml"), source))
    assert (code, added["done"]) == (0, 2), added
    assert added["frames_decoded"] == 0
    version = Pipeline.from_config(after).version
    for video_id in spoken:
        key = document_key("default", video_id, version)
        document = json.loads((Path(after.storage.object_store_uri) / key).read_text())
        assert document["speech"]["status"] == "done"
        assert document["speech"]["segments"], document["speech"]  # heard (the words vary)
    assert outbox_done(after) == Counter()  # backfill.notify is off by default
