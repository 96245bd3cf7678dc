"""Image embeddings through the per-video orchestration (LocalExecutor): a new image model
re-runs only the image embedder, and a video re-processed for another reason takes its frame
vectors back from the sinks instead of decoding again."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lance
import pytest

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from core.config import EmbedSettings, ImageEmbedSettings, ServiceConfig
from core.records import VideoRef
from devkit.samples import Scene, write_video
from devkit.tiny_clip import build_tiny_clip
from models.embedding import resolve_model_path
from models.image_embedding import ClipEmbedder
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from sinks.images import images_table_name
from sinks.lance import LanceFrameSink, LanceSummarySink
from stages.pipeline import Pipeline
from tests.runtime.support import processor


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("image-reuse")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"img-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        stages={
            "sample_fps": 2.0,
            "chunk_frames": 2,
            "image_embed": {"model": str(build_tiny_clip(root / "clip-a" / "tiny-clip"))},
        },
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


def with_stages(config: ServiceConfig, **changes: object) -> ServiceConfig:
    return config.model_copy(update={"stages": config.stages.model_copy(update=changes)})


def image_rows(config: ServiceConfig, video_id: str) -> list[dict[str, Any]]:
    model = ClipEmbedder(str(config.stages.image_embed.model)).model_id
    path = f"{config.storage.lance_uri}/{images_table_name(model)}.lance"
    rows: list[dict[str, Any]] = (
        lance.dataset(path).to_table(filter=f"video_id = '{video_id}'").to_pylist()
    )
    return rows


async def test_a_new_image_model_reembeds_frames_and_nothing_else(
    root: Path, config: ServiceConfig, store: RedisCheckpointStore
) -> None:
    scenes = [Scene(("ALPHA",), 1.0), Scene(("OMEGA",), 1.0)]
    source = write_video(root / "pictures.mp4", scenes, fps=10, size=(320, 240))
    ref = VideoRef("pictures", source.as_uri())
    summaries = LanceSummarySink(config.storage.lance_uri)
    frames = LanceFrameSink(config.storage.lance_uri)

    async def run(cfg: ServiceConfig) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        executor, results = LocalExecutor(cfg), LocalResults(cfg)
        try:
            await processor(cfg, executor, results, store).process(ref)
        finally:
            await executor.close()
            await results.close()
        status = await store.get("pictures")
        assert status is not None
        assert status.status is VideoState.DONE, status
        assert status.pipeline_version == Pipeline.from_config(cfg).version
        row = summaries.video_row("pictures")
        assert row is not None
        return row["timings"], frames.frame_rows("pictures", with_embedding=True)

    first, first_frames = await run(config)
    assert {"ocr", "image_embed", "embed"} <= set(first)
    first_vectors = image_rows(config, "pictures")
    assert first_vectors
    assert all(len(row["embedding"]) == 16 for row in first_vectors)

    # Another image model: only the image embedder runs; OCR and text embeddings are taken.
    other_model = str(build_tiny_clip(root / "clip-b" / "tiny-clip", dim=24))
    other = with_stages(config, image_embed=ImageEmbedSettings(model=other_model))
    second, second_frames = await run(other)
    assert "image_embed" in second
    assert set(second) & {"ocr", "embed"} == set()
    assert [(f["ocr_text"], f["embedding"]) for f in second_frames] == [
        (f["ocr_text"], f["embedding"]) for f in first_frames
    ]
    second_vectors = image_rows(other, "pictures")
    assert [r["frame_index"] for r in second_vectors] == [r["frame_index"] for r in first_vectors]
    assert all(len(row["embedding"]) == 24 for row in second_vectors)

    # Only the text embedder changes: the frame vectors come back from the sinks, so nothing
    # reads pixels (the source is gone and the video still completes).
    model = shutil.copytree(resolve_model_path("all-MiniLM-L6-v2"), root / "minilm-copy")
    new_text = with_stages(other, embed=EmbedSettings(model=str(model)))
    source.unlink()
    third, _ = await run(new_text)
    assert set(third) & {"ocr", "image_embed"} == set()
    assert "embed" in third
    assert [r["embedding"] for r in image_rows(new_text, "pictures")] == [
        r["embedding"] for r in second_vectors
    ]
