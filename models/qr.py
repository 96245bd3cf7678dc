"""QR codes in a frame, found and decoded with zxing-cpp (Apache-2.0, a C++ library with its
Python bindings in one wheel; no model weights).

Only the QR family is looked for (QR Code, Micro QR, rMQR): a 1D barcode on a product in the
picture is no link off the platform, and looking for every format costs time and invites
false finds. The library's own defaults stay on: it also tries the frame scaled down (a code
filling the frame), inverted (light on dark, as overlays often are) and turned by 90 degrees.
A code it cannot decode whole (covered, cut off, too blurred) gives nothing, never a guess:
errors are not returned.

Measured here (one core under ``taskset``, medians of 40 reads; frames 1280 x 720 of a
photograph with a code pasted by bilinear scaling, at four places; a code's side below counts
its quiet zone of 4 modules on each side):

- time: 2.4 CPU ms a frame without a code (1.8 ms on a flat frame, 7.5 ms on random noise, the
  worst case seen), 2.5 ms with a code of 120 or 300 px; CPU time equals wall time: the library
  runs on the calling thread only.
- size, for a 30-character URL (QR version 2: 33 modules with the quiet zone) and a
  70-character one (version 4: 41 modules): sharp and upright, it reads from about 1.5 px a
  module (50 and 60 px); turned by 5 to 45 degrees, from about 2 px a module (70 and 80 px);
  under a Gaussian blur of sigma 1 px, from about 3 px a module (100 and 120 px); of sigma
  1.5 px, from about 4 px a module (140 and 160 px).
  So a 120 px code in a 720p frame is read turned and slightly blurred. Scaling the frame up
  twice before reading found almost nothing more, at four times the cost: it is not done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.records import Image
from models.base import ModelEngine, package_version, require_rgb
from models.errors import InferenceFailed, ModelUnavailable

#: The formats looked for, by zxing-cpp's names (``BarcodeFormat``).
QR_FORMATS = ("QRCode", "MicroQRCode", "RMQRCode")

Point = tuple[int, int]


@dataclass(frozen=True)
class FoundCode:
    """One decoded code: its text, its format (one of ``QR_FORMATS``, or a model of QR Code
    the library names, ``QRCodeModel1``), and its corners in the image's pixels, clockwise
    from the symbol's own top left (which is not the image's top left when it is turned)."""

    text: str
    format: str
    box: tuple[Point, Point, Point, Point]


class QrReader(ModelEngine):
    """Finds and decodes the QR codes in RGB frames, on the calling thread."""

    def __init__(self) -> None:
        self._zxing: Any = None
        self._formats: Any = None

    @property
    def model_id(self) -> str:
        return f"zxing-cpp-{package_version('zxing-cpp')}:{','.join(QR_FORMATS)}"

    def load(self) -> None:
        try:
            import zxingcpp
        except ImportError as exc:
            raise ModelUnavailable(f"zxing-cpp is not importable: {exc}") from exc
        self._zxing = zxingcpp
        self._formats = zxingcpp.BarcodeFormats(
            [getattr(zxingcpp.BarcodeFormat, name) for name in QR_FORMATS]
        )

    def read(self, image: Image) -> list[FoundCode]:
        """The codes decoded in an RGB ``H x W x 3`` uint8 image, top to bottom, then left to
        right; [] where there is none."""
        if self._zxing is None:
            raise RuntimeError("QrReader.load() must run before read()")
        pixels = np.ascontiguousarray(require_rgb(image))
        zxing = self._zxing
        try:
            # A view that says RGB: a plain 3-channel array is taken as BGR.
            view = zxing.ImageView(pixels, pixels.shape[1], pixels.shape[0], zxing.ImageFormat.RGB)
            found = zxing.read_barcodes(view, formats=self._formats)
            codes = [_found(barcode) for barcode in found if barcode.valid]
        except Exception as exc:
            raise InferenceFailed(f"zxing-cpp failed on a {pixels.shape} frame: {exc}") from exc
        return sorted(codes, key=lambda c: (min(y for _, y in c.box), min(x for x, _ in c.box)))

    def close(self) -> None:
        self._zxing = None
        self._formats = None


def _found(barcode: Any) -> FoundCode:
    at = barcode.position
    box = (
        _point(at.top_left),
        _point(at.top_right),
        _point(at.bottom_right),
        _point(at.bottom_left),
    )
    return FoundCode(str(barcode.text), str(barcode.format.name), box)


def _point(point: Any) -> Point:
    return int(point.x), int(point.y)
