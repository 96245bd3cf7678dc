"""DetectStage and the visual detectors: off by default; a detector from another package
(``tests/plugins``, the ``reelsense.detectors`` entry point ``red_square``) finds a red square,
and the review stage makes its label a ``visual`` finding with the box, decided by the
thresholds; faces are counted per shot, never a finding."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from core.config import ReviewSettings, ServiceConfig
from core.records import Chunk, Frame, ProbeInfo, ShotBoundary, VideoRef, VideoResult
from core.review_settings import Thresholds
from core.stage_names import DETECT
from models.detectors import DetectorError, installed_detectors
from stages.base import Fusion
from stages.detect import DetectStage
from stages.pipeline import Pipeline
from stages.review import ReviewStage

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
SQUARE = {"red_square": {"RED_SQUARE": 1.0}}


@pytest.fixture(autouse=True)
def plugin_installed() -> Iterator[None]:
    """The plug-in package importable, as ``pip install`` would leave it."""
    sys.path.insert(0, str(PLUGINS))
    installed_detectors.cache_clear()
    yield
    sys.path.remove(str(PLUGINS))
    installed_detectors.cache_clear()


def config(**review: object) -> ServiceConfig:
    return ServiceConfig.load(asr={"enabled": False}, stages={"review": review})


def with_square(at: tuple[int, int] = (400, 200), side: int = 120) -> np.ndarray:
    image = np.full((720, 1280, 3), 90, np.uint8)
    image[at[1] : at[1] + side, at[0] : at[0] + side] = (255, 0, 0)
    return image


def test_off_by_default_and_on_with_detectors() -> None:
    assert DetectStage.build(config()) is None
    assert DETECT not in Pipeline.from_config(config()).lineage.versions
    assert DetectStage.build(config(detectors=["faces"])) is not None
    assert DetectStage.build(config(detectors=["faces"], enabled=False)) is None
    assert DetectStage.fusion is Fusion.PER_CORE
    assert list(installed_detectors()) == ["faces", "red_square"]


def test_an_unknown_detector_stops_the_start() -> None:
    stage = DetectStage(ReviewSettings(detectors=("nudity",)))
    with pytest.raises(DetectorError, match=r"'nudity'.*faces, red_square"):
        stage.version_params()


def test_its_version_follows_the_detectors_and_the_face_threshold() -> None:
    faces = DetectStage(ReviewSettings(detectors=("faces",))).version_params()
    both = DetectStage(ReviewSettings(detectors=("faces", "red_square"))).version_params()
    stricter = DetectStage(ReviewSettings(detectors=("faces",), face_threshold=0.7))
    assert len({str(faces), str(both), str(stricter.version_params())}) == 3
    assert "red_square=red-square-1" in str(both["models"])


def frames_detected(detectors: tuple[str, ...]) -> list[Frame]:
    """Ten 1 s samples, a red square shown in samples 3 and 4, a cut at 5 s."""
    stage = DetectStage(ReviewSettings(detectors=detectors))
    stage.setup()
    try:
        frames = [
            Frame(
                i, float(i), with_square() if i in (3, 4) else np.full((720, 1280, 3), 90, np.uint8)
            )
            for i in range(10)
        ]
        frames[5] = Frame(
            5, 5.0, frames[5].image, boundaries=[ShotBoundary(5.0, "cut", 0.9, 5.0, 5.0)]
        )
        (done,) = stage.process_batch([Chunk("clip", 0, frames)])
    finally:
        stage.teardown()
    return done.frames


def result_of(frames: list[Frame], tenant: str = "acme") -> VideoResult:
    kept = [
        Frame(f.index, f.timestamp_s, None, boundaries=f.boundaries, extras=f.extras)
        for f in frames
    ]
    probe = ProbeInfo("mp4", "h264", 1280, 720, 25.0, 10.0, 250, 1, 2000)
    return VideoResult(
        VideoRef("clip", "file:///clip.mp4", tenant=tenant), "v1", probe, kept, datetime.now(UTC)
    )


def test_a_plugin_detectors_unsafe_label_is_a_visual_finding_with_its_box() -> None:
    frames = frames_detected(("faces", "red_square"))
    (square,) = frames[3].extras[DETECT]
    assert square == {
        "detector": "red_square",
        "label": "RED_SQUARE",
        "score": 0.9,
        "box": [400.0, 200.0, 520.0, 320.0],
    }
    assert frames[0].extras[DETECT] == []  # nothing found: no face, no square

    flagged = ReviewStage(ReviewSettings(detectors=("faces", "red_square"), visual_labels=SQUARE))
    output = flagged.analyse(result_of(frames))
    visual = output.data["categories"]["visual"]
    assert (visual["findings"], visual["decision"]) == (2, "review")  # 0.9: review, not block
    assert visual["score"] == 0.9  # one label of one detector counts once
    first = visual["evidence"][0]
    assert (first["kind"], first["source"], first["frame_s"]) == ("RED_SQUARE", "red_square", 3.0)
    assert first["box"] == [[400.0, 200.0], [520.0, 200.0], [520.0, 320.0], [400.0, 320.0]]
    assert (first["start_s"], first["end_s"]) == (3.0, 4.0)
    assert output.data["decision"] == "review"
    assert output.data["faces"] == [
        {"shot": 0, "start_s": 0.0, "end_s": 5.0, "max_faces": 0},
        {"shot": 1, "start_s": 5.0, "end_s": 10.0, "max_faces": 0},
    ]

    strict = {"visual": Thresholds(review=0.3, block=0.85)}
    blocking = ReviewStage(ReviewSettings(visual_labels=SQUARE, tenant_thresholds={"acme": strict}))
    assert blocking.analyse(result_of(frames)).data["decision"] == "block"
    assert blocking.analyse(result_of(frames, tenant="other")).data["decision"] == "review"
    halved = ReviewStage(ReviewSettings(visual_labels={"red_square": {"RED_SQUARE": 0.5}}))
    assert halved.analyse(result_of(frames)).data["decision"] == "pass"  # 0.45 < 0.5


def test_a_label_not_named_unsafe_is_no_finding() -> None:
    frames = frames_detected(("red_square",))
    output = ReviewStage(ReviewSettings(detectors=("red_square",))).analyse(result_of(frames))
    assert output.data["categories"]["visual"]["findings"] == 0
    assert output.data["decision"] == "pass"
    assert "faces" not in output.data  # the faces detector did not run


def test_faces_are_counted_per_shot() -> None:
    def found(n: int) -> list[dict[str, object]]:
        face = {"detector": "faces", "label": "face", "score": 0.8, "box": [1, 2, 30, 40]}
        return [face] * n

    frames = [
        Frame(i, float(i), None, extras={DETECT: found(n)}) for i, n in enumerate([1, 2, 0, 3])
    ]
    frames[2] = Frame(
        2, 2.0, None, boundaries=[ShotBoundary(2.0, "cut", 0.9, 2.0, 2.0)], extras={DETECT: []}
    )
    output = ReviewStage(ReviewSettings(detectors=("faces",))).analyse(result_of(frames))
    assert [(s["shot"], s["max_faces"]) for s in output.data["faces"]] == [(0, 2), (1, 3)]
    assert output.data["categories"]["visual"]["findings"] == 0  # a face is no violation


def test_a_weight_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"visual_labels\.red_square\.RED_SQUARE"):
        ReviewSettings(visual_labels={"red_square": {"RED_SQUARE": 1.5}})
