"""OcrEngine on frames rendered like the sample videos (real RapidOCR models, CPU)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image

from core.errors import PermanentError
from devkit.samples import render_frame
from models.errors import InvalidImage
from models.ocr import OcrEngine


def normalise(text: str) -> str:
    """Spaces and punctuation out, case folded: what OCR must get right, not its spacing."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def read_text(engine: OcrEngine, image: np.ndarray) -> str:
    return normalise("".join(line.text for line in engine.read(image)))


@pytest.fixture(scope="module")
def engine() -> Iterator[OcrEngine]:
    ocr = OcrEngine(det_limit_side=640, min_score=0.5, threads=1)
    ocr.load()
    yield ocr
    ocr.close()


def test_reads_english(engine: OcrEngine) -> None:
    text = read_text(engine, render_frame(["INVOICE 2048", "Amount due: 315.20"]))
    assert "invoice2048" in text
    assert "amountdue" in text
    assert "31520" in text


def test_reads_chinese(engine: OcrEngine) -> None:
    text = read_text(engine, render_frame(["欢迎光临", "发票金额"], background=(20, 30, 90)))
    assert "欢迎光临" in text
    assert "发票金额" in text


def test_reads_mixed_text_through_grain(engine: OcrEngine) -> None:
    frame = render_frame(["NIGHT MARKET 夜市", "OPEN 24H"], seed=7, grain=12.0)
    text = read_text(engine, frame)
    assert "nightmarket" in text
    assert "夜市" in text
    assert "open24h" in text


def test_lines_have_scores_and_boxes_inside_the_frame(engine: OcrEngine) -> None:
    frame = render_frame(["SALE 50% OFF"], size=(960, 540))
    lines = engine.read(frame)
    assert lines
    for line in lines:
        assert 0.5 <= line.score <= 1.0
        assert len(line.box) == 4
        for x, y in line.box:
            assert -2 <= x <= 962
            assert -2 <= y <= 542


def test_blank_frame_has_no_lines(engine: OcrEngine) -> None:
    assert engine.read(np.zeros((720, 1280, 3), dtype=np.uint8)) == []
    assert engine.read(np.full((720, 1280, 3), 250, dtype=np.uint8)) == []


def test_reads_read_only_frames(engine: OcrEngine) -> None:
    # Frames fetched from Ray's object store are read-only views.
    frame = render_frame(["READ ONLY"])
    frame.setflags(write=False)
    assert "readonly" in read_text(engine, frame)


def test_rgb_frames_read_like_rapidocr_reads_rgb_pictures(engine: OcrEngine) -> None:
    # RapidOCR converts PIL pictures (RGB) to BGR itself but takes numpy arrays as BGR; frames
    # are RGB numpy arrays, so the engine must give exactly what RapidOCR gives for the picture.
    frame = render_frame(["CHANNELS 通道"], background=(200, 30, 30), seed=3, grain=6.0)
    ours = engine.read(frame)
    theirs = engine._ocr(Image.fromarray(frame))
    assert [line.text for line in ours] == list(theirs.txts)
    assert [line.score for line in ours] == pytest.approx(list(theirs.scores))


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((720, 1280), dtype=np.uint8),
        np.zeros((720, 1280, 4), dtype=np.uint8),
        np.zeros((720, 1280, 3), dtype=np.float32),
        np.zeros((0, 1280, 3), dtype=np.uint8),
        "not an image",
    ],
)
def test_bad_images_fail_permanently(engine: OcrEngine, bad: object) -> None:
    with pytest.raises(InvalidImage) as caught:
        engine.read(bad)  # type: ignore[arg-type]
    assert isinstance(caught.value, PermanentError)
    assert caught.value.code == "invalid_image"


def test_read_before_load_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="load"):
        OcrEngine().read(np.zeros((32, 32, 3), dtype=np.uint8))


def test_model_id_is_known_without_loading() -> None:
    model_id = OcrEngine().model_id
    assert model_id.startswith("rapidocr-3.")
    assert "PP-OCRv6" in model_id
