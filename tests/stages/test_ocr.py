"""OcrStage: every frame of every chunk, chunks of several videos in one batch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from core.config import OcrSettings, StageSettings
from core.records import Chunk, Frame
from devkit.samples import render_frame
from models.errors import InvalidImage
from stages.base import Resources, process_each
from stages.ocr import OcrStage


def normalise(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def chunk(video_id: str, index: int, images: list[np.ndarray | None]) -> Chunk:
    frames = [Frame(index=i, timestamp_s=float(i), image=image) for i, image in enumerate(images)]
    return Chunk(video_id=video_id, index=index, frames=frames)


@pytest.fixture(scope="module")
def stage() -> Iterator[OcrStage]:
    ocr = OcrStage(StageSettings(ocr=OcrSettings(det_limit_side=640, min_score=0.5, threads=1)))
    ocr.setup()
    yield ocr
    ocr.teardown()


def test_batch_of_two_videos_keeps_results_on_their_frames(stage: OcrStage) -> None:
    blank = np.full((720, 1280, 3), 250, dtype=np.uint8)
    first = chunk("video-a", 0, [render_frame(["ALPHA 111"]), blank, render_frame(["欢迎光临"])])
    second = chunk("video-b", 3, [None, render_frame(["BRAVO 222"], seed=1, grain=5.0)])
    out = stage.process_batch([first, second])

    assert [(c.video_id, c.index) for c in out] == [("video-a", 0), ("video-b", 3)]
    texts = [[normalise(frame.ocr_text) for frame in c.frames] for c in out]
    assert texts == [["alpha111", "", "欢迎光临"], ["", "bravo222"]]
    assert out[0].frames[1].ocr_lines == []
    assert out[1].frames[0].ocr_lines == []  # no pixels: nothing to read, nothing invented
    assert all(line.score >= 0.5 for line in out[0].frames[0].ocr_lines)


def test_empty_batch(stage: OcrStage) -> None:
    assert stage.process_batch([]) == []


def test_a_bad_frame_fails_its_own_video_only(stage: OcrStage) -> None:
    bad = chunk("video-c", 0, [np.zeros((720, 1280), dtype=np.uint8)])
    good = [chunk(f"video-{n}", 0, [render_frame([f"GOOD {n}"])]) for n in (1, 2, 3)]
    batch = [good[0], bad, *good[1:]]
    with pytest.raises(InvalidImage):  # the stage fails a batch as a whole
        stage.process_batch(batch)

    outcomes = process_each(stage, batch)

    assert isinstance(outcomes[1], InvalidImage)
    assert outcomes[1].code == "invalid_image"
    read = [o for o in outcomes if isinstance(o, Chunk)]
    assert [c.video_id for c in read] == ["video-1", "video-2", "video-3"]
    assert [normalise(c.frames[0].ocr_text) for c in read] == ["good1", "good2", "good3"]


def test_version_params_cover_what_changes_the_output() -> None:
    base = OcrStage(StageSettings()).version_params()
    assert "rapidocr" in str(base["model"])
    assert OcrStage(StageSettings(ocr=OcrSettings(det_limit_side=960))).version_params() != base
    assert OcrStage(StageSettings(ocr=OcrSettings(min_score=0.7))).version_params() != base
    # Threads change speed, not text.
    assert OcrStage(StageSettings(ocr=OcrSettings(threads=2))).version_params() == base


def test_resources_are_the_pool_defaults() -> None:
    # What an OCR pool got before stages declared it; threads follow the CPUs granted.
    assert OcrStage(StageSettings(ocr=OcrSettings(threads=2))).resources == Resources(cpus=0.8)


def test_process_before_setup_and_after_teardown() -> None:
    ocr = OcrStage(StageSettings())
    with pytest.raises(RuntimeError, match="setup"):
        ocr.process_batch([chunk("v", 0, [render_frame(["X"])])])
    ocr.setup()
    ocr.teardown()
    with pytest.raises(RuntimeError, match="setup"):
        ocr.process_batch([chunk("v", 0, [render_frame(["X"])])])
