"""The ImageNet classifier on real photographs (Debian darknet's), exported to ONNX once."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

from devkit.photo_pans import DARKNET_SUBJECTS, darknet_photo
from models.errors import InvalidImage, ModelLoadError
from models.labels import ImageClassifier, imagenet_classes


def _photo(name: str) -> np.ndarray:
    return np.asarray(PILImage.open(darknet_photo(name)).convert("RGB"))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> ImageClassifier:
    engine = ImageClassifier(cache_dir=tmp_path_factory.mktemp("cache"))
    engine.load()
    return engine


def test_the_class_table_has_every_output_with_its_kinds() -> None:
    classes = imagenet_classes()
    assert [c.index for c in classes] == list(range(1000))
    by_name = {c.name: c for c in classes}
    for rabbit in ("hare", "wood rabbit", "Angora"):
        assert by_name[rabbit].kinds == ("rabbit", "animal")
    assert "dog" in by_name["German shepherd"].kinds
    assert "dog" not in by_name["hotdog"].kinds  # a food, not an animal
    assert "vehicle" in by_name["streetcar"].kinds


def test_photographs_come_back_as_what_they_show(classifier: ImageClassifier) -> None:
    names = list(DARKNET_SUBJECTS)
    rows = classifier.probabilities([_photo(name) for name in names])
    assert rows.shape == (len(names), 1000)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=1e-4)
    classes = imagenet_classes()
    for name, row in zip(names, rows, strict=True):
        best = row.argsort()[::-1][:5]
        kind_share = sum(row[i] for i in best if DARKNET_SUBJECTS[name] in classes[i].kinds)
        assert kind_share > 0.25, (name, [(classes[i].name, float(row[i])) for i in best])


def test_the_export_is_kept_and_read_back(tmp_path: Path) -> None:
    first = ImageClassifier(cache_dir=tmp_path)
    first.load()
    (exported,) = tmp_path.glob("*.onnx")
    before = exported.stat().st_mtime_ns
    again = ImageClassifier(cache_dir=tmp_path)
    again.load()
    assert exported.stat().st_mtime_ns == before  # read, not exported again
    image = _photo("dog")
    np.testing.assert_allclose(
        first.probabilities([image]), again.probabilities([image]), atol=1e-6
    )


def test_an_unwritable_cache_keeps_the_export_in_memory(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    engine = ImageClassifier(cache_dir=blocked / "cache")
    engine.load()
    assert engine.probabilities([_photo("eagle")]).shape == (1, 1000)
    assert not os.path.exists(blocked / "cache")


def test_a_frame_that_is_not_an_rgb_image_is_refused(classifier: ImageClassifier) -> None:
    with pytest.raises(InvalidImage):
        classifier.probabilities([np.zeros((10, 10), np.uint8)])
    assert classifier.probabilities([]).shape == (0, 1000)


def test_a_damaged_export_in_the_cache_is_made_again(tmp_path: Path) -> None:
    ImageClassifier(cache_dir=tmp_path).load()
    (exported,) = tmp_path.glob("*.onnx")
    exported.write_bytes(b"half an export")  # a disk filled up under another process
    engine = ImageClassifier(cache_dir=tmp_path)
    engine.load()
    assert engine.probabilities([_photo("dog")]).shape == (1, 1000)
    assert exported.stat().st_size > 1_000_000  # replaced by a whole one


def test_missing_weights_are_a_clear_error_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from models import labels

    monkeypatch.setattr(labels, "_WEIGHTS_FILE", "models/no-such-weights.pth")
    labels.weights.cache_clear()
    try:
        with pytest.raises(ModelLoadError, match="weights are missing"):
            ImageClassifier().model_id  # noqa: B018 - the pipeline version reads it at start
    finally:
        labels.weights.cache_clear()
