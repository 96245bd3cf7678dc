"""Review through the per-video orchestration (LocalExecutor, real OCR, real QR reading, real
Redis): a video showing a phone number, a WeChat id and a QR code is flagged with its evidence
in the stored result, its ``video.done`` says the decision and a ``video.review`` follows it in
the same step; a clean video passes and gets no ``video.review``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkpoint.base import OutboxEvent
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from devkit.samples import Scene, write_video
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from sinks.object_store import document_key
from stages.pipeline import Pipeline
from storage.local import LocalObjectStore
from tests.runtime.support import processor

pytestmark = pytest.mark.timeout(300)

JOIN = "https://t.cn/A6abcdEf"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("review")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"review-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        stages={"sample_fps": 1.0, "chunk_frames": 4},
        asr={"enabled": False},
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


async def events_of(store: RedisCheckpointStore, video_id: str) -> list[OutboxEvent]:
    entries = await store._redis.xrange(store._outbox)
    events = [OutboxEvent.model_validate_json(fields["event"]) for _, fields in entries]
    return [event for event in events if event.video_id == video_id]


def document(config: ServiceConfig, ref: VideoRef) -> dict[str, Any]:
    version = Pipeline.from_config(config).version
    objects = LocalObjectStore(config.storage.object_store_uri)
    stored = objects.get_bytes(document_key(ref.tenant, ref.video_id, version))
    assert stored is not None
    loaded: dict[str, Any] = json.loads(stored)
    return loaded


async def test_a_video_drawing_users_away_is_flagged_with_its_evidence(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    scenes = [
        Scene(("限时优惠", "咨询热线 138 1234 5678"), 2.0),
        Scene(("扫码进群", "加微信 shop_8888"), 2.0, qr=JOIN),
    ]
    ad = VideoRef("ad", write_video(root / "ad.mp4", scenes, fps=10).as_uri(), tenant="acme")
    clean = VideoRef(
        "clean",
        write_video(root / "clean.mp4", [Scene(("欢迎光临",), 2.0)], fps=10).as_uri(),
        tenant="acme",
    )
    work = processor(config, executor, results, store)
    assert await work.process(ad) == "done"
    assert await work.process(clean) == "done"

    review = document(config, ad)["outputs"]["review"]["data"]
    categories = review["categories"]
    assert review["decision"] in ("review", "block")
    shown = {(e["kind"], e["source"]) for e in categories["contact"]["evidence"]}
    assert {("phone", "text"), ("wechat", "text"), ("url", "qr")} <= shown
    (code,) = categories["qr"]["evidence"]
    assert code["value"] == JOIN
    assert 2.0 <= code["start_s"] < code["end_s"] <= 4.0
    assert code["box"] is not None

    done, flagged = await events_of(store, "ad")
    assert (done.type, flagged.type) == ("video.done", "video.review")
    assert done.data["review"]["decision"] == review["decision"]
    assert "evidence" not in json.dumps(done.data)  # counts and decisions only
    assert flagged.data["decision"] == review["decision"]
    assert flagged.data["categories"]["qr"]["findings"] == 1
    assert flagged.webhook_id != done.webhook_id

    (clean_done,) = await events_of(store, "clean")
    assert clean_done.data["review"]["decision"] == "pass"
