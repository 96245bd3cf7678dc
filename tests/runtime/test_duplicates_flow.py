"""Re-uploads through the per-video orchestration (LocalExecutor, real decoding, real Lance,
real Redis): an original analysed and written, then its copies: re-encoded at a third of the
bitrate, cropped by 10% with a logo, and mirrored, each finding the original with its span in
the stored result and in ``video.done``; a video that opens with the original's title card
finds nothing, and neither does a copy uploaded by another tenant."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from devkit.copies import Change, write_copy
from devkit.edited_videos import Shot, write_edit
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from sinks.fingerprints import LanceFingerprintSink
from tests.runtime.support import processor
from tests.runtime.test_review_flow import document, events_of

pytestmark = pytest.mark.timeout(300)

SIZE = (480, 270)
TITLE = Shot(4.0, seed=777, caption="EVENING NEWS")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("duplicates")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"duplicates-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        stages={
            "sample_fps": 1.0,
            "chunk_frames": 4,
            "labels": {"enabled": False},
            "chapters": {"enabled": False},
            "review": {"enabled": False},
        },
        asr={"enabled": False},
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


def edit(root: Path, name: str, seeds: range) -> Path:
    shots = [TITLE, *(Shot(4.0, seed=s, pan_px_per_s=20.0) for s in seeds)]
    return write_edit(root / f"{name}.mp4", shots, fps=10, size=SIZE).path


async def test_copies_find_their_original_and_look_alikes_find_nothing(
    root: Path,
    config: ServiceConfig,
    executor: LocalExecutor,
    results: LocalResults,
    store: RedisCheckpointStore,
) -> None:
    original = edit(root, "original", range(1, 5))
    copies = {
        "reencoded": Change("reencoded", bitrate_share=1 / 3),
        "cropped": Change("cropped", crop=0.1, logo="REPOST"),
        "mirrored": Change("mirrored", mirror=True),
    }
    work = processor(config, executor, results, store)
    assert await work.process(VideoRef("original", original.as_uri())) == "done"
    assert LanceFingerprintSink.from_settings(config.storage).count_rows("original") > 10

    earlier: list[str] = []  # the copies written before: each later copy finds them too
    for name, change in copies.items():
        path = write_copy(original, root / f"{name}.mp4", change)
        assert await work.process(VideoRef(name, path.as_uri())) == "done"
        data = document(config, VideoRef(name, path.as_uri()))["outputs"]["duplicates"]["data"]
        found = {other["video_id"]: other for other in data["duplicates"]}
        assert set(found) == {"original", *earlier}
        first = found["original"]
        assert first["mirrored"] is (name == "mirrored")
        assert first["score"] >= 0.6
        (span,) = first["spans"]
        assert span["start_s"] <= 1.0
        assert span["end_s"] >= 19.0
        assert abs(span["other_start_s"] - span["start_s"]) <= 1.0
        (done,) = await events_of(store, name)
        assert done.data["duplicates"] == [
            {key: other[key] for key in ("video_id", "score", "mirrored", "spans")}
            for other in data["duplicates"]
        ]
        earlier.append(name)

    lookalike = VideoRef("lookalike", edit(root, "lookalike", range(11, 15)).as_uri())
    assert await work.process(lookalike) == "done"
    assert document(config, lookalike)["outputs"]["duplicates"]["data"]["duplicates"] == []

    elsewhere = VideoRef("elsewhere", (root / "reencoded.mp4").as_uri(), tenant="other")
    assert await work.process(elsewhere) == "done"
    assert document(config, elsewhere)["outputs"]["duplicates"]["data"]["duplicates"] == []
