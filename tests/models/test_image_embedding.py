"""ClipEmbedder on a tiny random CLIP built at test time: the real processor and both towers,
unit vectors of one dimension, the same vectors every time, load failures mapped."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import ImageEmbedSettings, StageSettings
from devkit.samples import render_frame
from devkit.tiny_clip import build_tiny_clip
from models.errors import InvalidImage, ModelLoadError
from models.image_embedding import ClipEmbedder, image_embedder

DIM = 16


@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("models") / "tiny-clip", dim=DIM)


@pytest.fixture(scope="module")
def engine(tiny_clip_dir: Path) -> Iterator[ClipEmbedder]:
    clip = ClipEmbedder(str(tiny_clip_dir), batch_size=2)
    clip.load()
    yield clip
    clip.close()


def images() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        np.zeros((720, 1280, 3), dtype=np.uint8),
        rng.integers(0, 256, (360, 640, 3), dtype=np.uint8),
        render_frame(["INVOICE 2048"], size=(640, 360)),
        rng.integers(0, 256, (300, 200, 3), dtype=np.uint8),  # another size in the same batch
        np.full((40, 60, 3), 255, dtype=np.uint8),
    ]


def test_images_and_texts_become_unit_vectors_of_one_dimension(engine: ClipEmbedder) -> None:
    pictured = engine.embed_images(images())  # 5 images in batches of 2
    said = engine.embed_texts(["a red car on the street", "", "night " * 100])  # one too long
    assert engine.dimension == DIM
    assert pictured.shape == (5, DIM)
    assert said.shape == (3, DIM)
    assert pictured.dtype == said.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(pictured, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(said, axis=1), 1.0, atol=1e-5)
    assert len({row.tobytes() for row in pictured}) == 5  # each image its own vector
    assert engine.embed_images([]).shape == (0, DIM)


def test_the_same_inputs_give_the_same_vectors_in_any_batch(
    engine: ClipEmbedder, tiny_clip_dir: Path
) -> None:
    batched = engine.embed_images(images())
    alone = np.concatenate([engine.embed_images([image]) for image in images()])
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    again = ClipEmbedder(str(tiny_clip_dir))
    again.load()
    np.testing.assert_allclose(again.embed_texts(["cat"]), engine.embed_texts(["cat"]), atol=1e-6)
    again.close()


def test_the_model_id_follows_the_weights_not_only_the_name(
    tiny_clip_dir: Path, tmp_path: Path
) -> None:
    same = shutil.copytree(tiny_clip_dir, tmp_path / "tiny-clip")
    other = build_tiny_clip(tmp_path / "other" / "tiny-clip", dim=DIM + 8)
    ids = {ClipEmbedder(str(path)).model_id for path in (tiny_clip_dir, same, other)}
    assert len(ids) == 2
    assert all(model_id.startswith("tiny-clip-") for model_id in ids)


def test_a_missing_or_broken_folder_fails_to_load(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError):
        ClipEmbedder(str(tmp_path / "absent")).load()
    with pytest.raises(ModelLoadError):
        _ = ClipEmbedder(str(tmp_path / "absent")).model_id
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError):
        ClipEmbedder(str(tmp_path / "broken")).load()


def test_a_frame_that_is_not_rgb_is_refused(engine: ClipEmbedder) -> None:
    with pytest.raises(InvalidImage):
        engine.embed_images([np.zeros((10, 10), dtype=np.uint8)])


def test_off_unless_a_model_is_configured(tiny_clip_dir: Path) -> None:
    assert image_embedder(StageSettings()) is None
    made = image_embedder(StageSettings(image_embed=ImageEmbedSettings(model=str(tiny_clip_dir))))
    assert isinstance(made, ClipEmbedder)
