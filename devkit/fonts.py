"""A font that draws Chinese, for the sample videos' burned-in text and the benchmark charts."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image as PILImage
from PIL import ImageDraw, ImageFont

FONT_ENV = "REELSENSE_SAMPLE_FONT"
_DEFAULT_FONT = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
_FONT_DIRS = (
    Path(__file__).parent / "fonts",
    Path("/usr/share/fonts"),
    Path("/usr/local/share/fonts"),
)
_CJK_PROBE = "欢迎"


class FontNotFound(RuntimeError):
    """No font with CJK glyphs is installed; sample videos need one to burn in Chinese text."""


def _has_cjk(path: Path) -> bool:
    try:
        font = ImageFont.truetype(str(path), 32)
    except OSError:
        return False
    # A font without the glyph draws its "missing" box for both probe and an unmapped code point.
    probe, missing = (_glyph_pixels(font, text) for text in (_CJK_PROBE[0], "\U0010fffd"))
    return bool(probe.any()) and not np.array_equal(probe, missing)


def _glyph_pixels(font: ImageFont.FreeTypeFont, text: str) -> npt.NDArray[np.uint8]:
    canvas = PILImage.new("L", (48, 48), 0)
    ImageDraw.Draw(canvas).text((8, 8), text, font=font, fill=255)
    return np.asarray(canvas, dtype=np.uint8)


@lru_cache(maxsize=1)
def find_cjk_font() -> Path:
    """Path of a TrueType/OpenType font that has CJK glyphs.

    ``REELSENSE_SAMPLE_FONT`` wins, then WenQuanYi Micro Hei (Debian ``fonts-wqy-microhei``),
    then any installed font that draws Chinese. Raises :class:`FontNotFound` when none does.
    """
    candidates: list[Path] = []
    if os.environ.get(FONT_ENV):
        candidates.append(Path(os.environ[FONT_ENV]))
    candidates.append(Path(_DEFAULT_FONT))
    for folder in _FONT_DIRS:
        if folder.is_dir():
            for pattern in ("*.ttc", "*.ttf", "*.otf", "*.otc"):
                candidates.extend(sorted(folder.rglob(pattern)))
    for path in candidates:
        if path.is_file() and _has_cjk(path):
            return path
    raise FontNotFound(
        "no font with Chinese glyphs found; install fonts-wqy-microhei "
        f"(apt-get install fonts-wqy-microhei) or set {FONT_ENV} to a .ttf/.ttc/.otf file"
    )


@lru_cache(maxsize=32)
def cjk_font(size: int) -> ImageFont.FreeTypeFont:
    """The CJK font at ``size`` pixels."""
    return ImageFont.truetype(str(find_cjk_font()), size)
