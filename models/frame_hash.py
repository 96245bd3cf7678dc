"""A perceptual hash of a frame: 64 bits that stay close when the video is re-encoded,
scaled, cropped a little or marked with a logo, and differ for other pictures.

The frame's centre (``CENTRE`` of each side, so a crop or a corner logo moves less of it) is
shrunk to 32 x 32 grey levels; the hash holds, for the 8 x 8 lowest frequencies of its
discrete cosine transform, whether each is above their median (the DC term excluded). The
same transform of the mirrored picture is the original's with every odd horizontal frequency
negated, so the mirror's hash costs a sign flip. ``weak`` marks the bits whose coefficient is
nearest the median, the first to flip in a copy: a lookup also tries them flipped. Measured
on 60 s of textured 540p video (devkit.copies): copies differ by a median of 0-10 bits (a
third of the bitrate 10, a 10% crop 10, a logo 6, scaled or mirrored 0); other frames by 32,
and 1% of them by 22 or fewer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import NDArray
from PIL import Image as PILImage

from core.records import Image

CENTRE = 0.8  # the share of each side hashed, about the middle
_SIDE = 32  # the grey picture's side
_FREQUENCIES = 8  # the lowest frequencies kept, per axis
WEAK_BITS = 12  # bits marked weak, of the 64
# A picture with a grey-level spread under this (of 255) shows nothing to tell it by: black,
# a flat colour, a fade. Its hash matches every other such picture.
FLAT_STD = 6.0
REVISION = 1  # bump when the hash of a picture changes


@dataclass(frozen=True)
class FrameHash:
    """A frame's hash, its mirror's, and the weak bits of each."""

    value: int
    mirror: int
    weak: int
    mirror_weak: int
    flat: bool

    def to_json(self) -> dict[str, object]:
        return {
            "hash": f"{self.value:016x}",
            "mirror": f"{self.mirror:016x}",
            "weak": f"{self.weak:016x}",
            "mirror_weak": f"{self.mirror_weak:016x}",
            "flat": self.flat,
        }

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> FrameHash:
        return cls(
            value=int(str(raw["hash"]), 16),
            mirror=int(str(raw["mirror"]), 16),
            weak=int(str(raw["weak"]), 16),
            mirror_weak=int(str(raw["mirror_weak"]), 16),
            flat=bool(raw["flat"]),
        )


@cache
def _dct_matrix() -> NDArray[np.float64]:
    """The orthonormal DCT-II basis: its lowest ``_FREQUENCIES`` rows over ``_SIDE`` samples."""
    k = np.arange(_FREQUENCIES)[:, None]
    n = np.arange(_SIDE)[None, :]
    basis = np.cos(np.pi * (2 * n + 1) * k / (2 * _SIDE)) * np.sqrt(2 / _SIDE)
    basis[0] /= np.sqrt(2)
    return np.asarray(basis, dtype=np.float64)


# (-1)^v for horizontal frequency v: the transform of the mirrored picture.
_MIRROR = np.tile((-1.0) ** np.arange(_FREQUENCIES), _FREQUENCIES)


def frame_hash(image: Image) -> FrameHash:
    """The hash of an RGB frame (height x width x 3, uint8)."""
    height, width = image.shape[:2]
    dy, dx = round(height * (1 - CENTRE) / 2), round(width * (1 - CENTRE) / 2)
    picture = PILImage.fromarray(image[dy : height - dy, dx : width - dx]).convert("L")
    grey = np.asarray(picture.resize((_SIDE, _SIDE), PILImage.Resampling.BOX), dtype=np.float64)
    basis = _dct_matrix()
    coefficients = (basis @ grey @ basis.T).reshape(-1)
    value, weak = _bits(coefficients)
    mirror, mirror_weak = _bits(coefficients * _MIRROR)
    return FrameHash(value, mirror, weak, mirror_weak, flat=float(grey.std()) < FLAT_STD)


def _bits(coefficients: NDArray[np.float64]) -> tuple[int, int]:
    """The hash bits (above the median of the AC terms) and the weak ones, first bit = the DC
    position (always 0: the DC term is not compared)."""
    ac = coefficients.copy()
    ac[0] = np.nan
    median = float(np.nanmedian(ac))
    above = np.nan_to_num(ac - median, nan=np.inf)
    bits = np.where(np.isfinite(above), above > 0, False)
    weak = np.zeros(bits.size, dtype=bool)
    weak[np.argsort(np.abs(above))[:WEAK_BITS]] = True
    return _packed(bits), _packed(weak)


def _packed(bits: NDArray[np.bool_]) -> int:
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def hamming(a: int, b: int) -> int:
    """How many bits of two hashes differ."""
    return (a ^ b).bit_count()
