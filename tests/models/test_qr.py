"""The QR reader on 720p frames holding codes that zxing-cpp itself wrote: small, turned,
blurred, two at once, in any language; a damaged code and a frame without one give nothing."""

from __future__ import annotations

import numpy as np
import pytest
import zxingcpp
from PIL import Image as PILImage
from PIL import ImageFilter

from models.errors import InvalidImage
from models.qr import QrReader

URL = "https://example.com/join?ref=video-42"
WIDTH, HEIGHT = 1280, 720


def code(text: str, side: int, fmt: str = "QRCode", angle: float = 0.0) -> PILImage.Image:
    """A code of ``text`` with its quiet zone, ``side`` pixels wide, turned by ``angle``."""
    barcode = zxingcpp.create_barcode(text, getattr(zxingcpp.BarcodeFormat, fmt))
    image = PILImage.fromarray(np.asarray(barcode.to_image(scale=8))).convert("RGB")
    image = image.resize(
        (side, round(side * image.height / image.width)), PILImage.Resampling.BILINEAR
    )
    if angle:
        image = image.rotate(angle, PILImage.Resampling.BILINEAR, expand=True, fillcolor="white")
    return image


def frame(*codes: tuple[PILImage.Image, tuple[int, int]], blur: float = 0.0) -> np.ndarray:
    """A 1280 x 720 frame of a grey gradient (not a flat page) with ``codes`` pasted at their
    top-left corners."""
    ramp = np.linspace(60, 190, WIDTH, dtype=np.uint8)
    image = PILImage.fromarray(np.dstack([np.tile(ramp, (HEIGHT, 1))] * 3))
    for pasted, at in codes:
        image.paste(pasted, at)
    if blur:
        image = image.filter(ImageFilter.GaussianBlur(blur))
    return np.array(image)


@pytest.fixture(scope="module")
def reader() -> QrReader:
    engine = QrReader()
    engine.load()
    return engine


def test_a_code_in_a_frame_is_read_with_its_place(reader: QrReader) -> None:
    (found,) = reader.read(frame((code(URL, 200), (700, 300))))
    assert (found.text, found.format) == (URL, "QRCode")
    xs = [x for x, _ in found.box]
    ys = [y for _, y in found.box]
    # The symbol inside its quiet zone (4 of 37 modules on each side of the 200 px).
    assert 700 < min(xs) < 730 < 870 < max(xs) < 900
    assert 300 < min(ys) < 330 < 470 < max(ys) < 500


@pytest.mark.parametrize("angle", [5.0, 20.0, 45.0])
def test_a_turned_code_is_read(reader: QrReader, angle: float) -> None:
    assert [c.text for c in reader.read(frame((code(URL, 200, angle=angle), (200, 150))))] == [URL]


def test_a_small_code_is_read_even_slightly_blurred(reader: QrReader) -> None:
    # 120 px of a 1280 x 720 frame: about 3.2 px a module for this 37-module code.
    small = code(URL, 120, angle=8.0)
    assert [c.text for c in reader.read(frame((small, (1000, 500))))] == [URL]
    assert [c.text for c in reader.read(frame((small, (1000, 500)), blur=1.0))] == [URL]


def test_a_frame_without_a_code_gives_nothing(reader: QrReader) -> None:
    assert reader.read(frame()) == []
    rng = np.random.default_rng(7)
    assert reader.read(rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)) == []


def test_a_half_covered_code_gives_nothing_rather_than_garbage(reader: QrReader) -> None:
    pasted = code(URL, 240)
    damaged = frame((pasted, (400, 200)))
    damaged[200 : 200 + 120, 400 : 400 + 240] = 128  # the top half, finder patterns included
    assert reader.read(damaged) == []
    stained = frame((pasted, (400, 200)))
    stained[200 + 140 : 200 + 170, 400 + 140 : 400 + 170] = 128  # a stain: error correction
    assert [c.text for c in reader.read(stained)] == [URL]
    torn = frame((pasted, (400, 200)))
    torn[200 + 60 : 200 + 180, 400 : 400 + 240] = 128  # the middle half, finders left
    assert reader.read(torn) == []


def test_two_codes_and_any_language_come_back_top_to_bottom(reader: QrReader) -> None:
    chinese = "加微信 abc123 领取优惠：https://例子.中国/"
    contact = "BEGIN:VCARD\nVERSION:3.0\nTEL:+86 138 0013 8000\nEND:VCARD"
    found = reader.read(frame((code(contact, 220), (900, 400)), (code(chinese, 220), (100, 60))))
    assert [c.text for c in found] == [chinese, contact]
    assert all(c.format == "QRCode" for c in found)


def test_micro_qr_and_rmqr_are_read_and_other_barcodes_are_not(reader: QrReader) -> None:
    codes = (
        (code("12345", 120, "MicroQRCode"), (80, 80)),
        (code("RMQR42", 300, "RMQRCode"), (80, 400)),
        (code("DATAMATRIX", 150, "DataMatrix"), (700, 80)),
        (code("4006381333931", 300, "EAN13"), (700, 400)),
    )
    found = reader.read(frame(*codes))
    assert [(c.text, c.format) for c in found] == [
        ("12345", "MicroQRCode"),
        ("RMQR42", "RMQRCode"),
    ]


def test_its_id_names_the_library_and_its_version() -> None:
    assert QrReader().model_id.startswith("zxing-cpp-3.1.1:")


def test_a_frame_that_is_not_rgb_is_refused(reader: QrReader) -> None:
    with pytest.raises(InvalidImage):
        reader.read(np.zeros((HEIGHT, WIDTH), dtype=np.uint8))
    with pytest.raises(InvalidImage):
        reader.read(np.zeros((HEIGHT, WIDTH, 3), dtype=np.float32))


def test_a_slice_of_a_frame_is_read_as_it_is_shown(reader: QrReader) -> None:
    # A crop is not contiguous in memory: its rows are the frame's, cut short.
    crop = frame((code(URL, 400), (100, 100)))[50:600, 50:700]
    assert not crop.flags.c_contiguous
    (found,) = reader.read(crop)
    assert found.text == URL
    assert min(x for x, _ in found.box) < 100  # in the crop's pixels, not the frame's


def test_read_before_load_is_a_mistake() -> None:
    with pytest.raises(RuntimeError, match="load"):
        QrReader().read(frame())
