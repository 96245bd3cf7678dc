"""ImageEmbedStage on a tiny random CLIP: a vector per frame with pixels, repeats take their
original's; off unless configured; its version follows the model and reaches only itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import ImageEmbedSettings, ServiceConfig, StageSettings
from core.records import Chunk, Frame
from devkit.tiny_clip import build_tiny_clip
from runtime.executor import merge_outputs
from stages.image_embed import ImageEmbedStage
from stages.pipeline import Pipeline

DIM = 16


@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("stage") / "tiny-clip", dim=DIM)


@pytest.fixture(scope="module")
def stage(tiny_clip_dir: Path) -> Iterator[ImageEmbedStage]:
    embed = ImageEmbedStage(StageSettings(image_embed=ImageEmbedSettings(model=str(tiny_clip_dir))))
    embed.setup()
    yield embed
    embed.teardown()


def config(**stages: object) -> ServiceConfig:
    return ServiceConfig.load(stages=stages)


def test_every_frame_with_pixels_gets_a_vector_and_repeats_take_their_originals(
    stage: ImageEmbedStage,
) -> None:
    rng = np.random.default_rng(3)
    first = Chunk(
        "video-a",
        0,
        [
            Frame(0, 0.0, rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)),
            Frame(1, 1.0, None, repeat_of=0),  # looks like sample 0: not analysed
            Frame(2, 2.0, np.zeros((90, 160, 3), dtype=np.uint8)),
        ],
    )
    second = Chunk("video-b", 0, [Frame(0, 0.0, np.full((50, 50, 3), 200, dtype=np.uint8))])
    done = stage.process_batch([first, second])  # two videos in one call
    vectors = [f.image_embedding for chunk in done for f in chunk.frames]
    assert vectors[1] is None
    for vector in (vectors[0], vectors[2], vectors[3]):
        assert vector is not None
        assert vector.shape == (DIM,)
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    filled = merge_outputs([done[0]], stage.fills).with_repeats_filled(stage.fills)
    assert filled.frames[1].image_embedding is not None
    np.testing.assert_array_equal(filled.frames[1].image_embedding, vectors[0])
    assert filled.frames[0].image is None  # merged outputs carry no pixels


def test_off_unless_a_model_is_configured(tiny_clip_dir: Path) -> None:
    plain = Pipeline.from_config(config())
    assert "image_embed" not in {stage.name for stage in plain.image_stages}
    assert "image_embed" not in plain.lineage.versions
    with pytest.raises(ValueError, match=r"image_embed\.model"):
        ImageEmbedStage(StageSettings())
    on = Pipeline.from_config(config(image_embed={"model": str(tiny_clip_dir)}))
    assert on.lineage.fills["image_embed"] == ("image_embedding",)
    assert "image_embedding" in on.lineage.analysed_fields
    assert on.version != plain.version


def test_a_new_image_model_changes_its_version_and_nothing_else(
    tiny_clip_dir: Path, tmp_path: Path
) -> None:
    other = build_tiny_clip(tmp_path / "tiny-clip", dim=DIM * 2)  # the same name, another model
    base = Pipeline.from_config(config(image_embed={"model": str(tiny_clip_dir)})).lineage
    changed = Pipeline.from_config(config(image_embed={"model": str(other)})).lineage
    assert {s for s in base.versions if base.versions[s] != changed.versions[s]} == {"image_embed"}
    assert changed.reusable(base.versions) == frozenset({"ocr", "labels", "qr", "fingerprint"})
    assert changed.embeddings_reusable(base.versions)  # the embedder reads no pixels
    assert base.text_stages == frozenset({"ocr"})
    # Speed only: not part of the version.
    faster = config(image_embed={"model": str(tiny_clip_dir), "threads": 4, "batch_size": 2})
    assert Pipeline.from_config(faster).lineage.versions == base.versions
