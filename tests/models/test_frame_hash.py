"""The frame hash: close for a picture re-encoded, scaled, cropped a little or with a logo,
the mirror's hash read off the original's, far for other pictures, flat for black."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image as PILImage

from core.records import Image
from devkit.copies import Change, changed
from models.frame_hash import FLAT_STD, FrameHash, frame_hash, hamming

SIZE = (640, 360)


def picture(seed: int) -> Image:
    """A smooth random colour field, as the test edits' shots show."""
    cells = np.random.default_rng(seed).integers(30, 226, size=(7, 12, 3), dtype=np.uint8)
    smooth = PILImage.fromarray(cells).resize(SIZE, PILImage.Resampling.BICUBIC)
    return np.asarray(smooth, dtype=np.uint8)


def jpeg(image: Image, quality: int) -> Image:
    out = io.BytesIO()
    PILImage.fromarray(image).save(out, format="JPEG", quality=quality)
    return np.asarray(PILImage.open(out).convert("RGB"))


def test_a_changed_copy_hashes_close_and_other_pictures_far() -> None:
    original = picture(1)
    hashed = frame_hash(original)
    changes = [
        Change("scaled", height=180),
        Change("cropped", crop=0.1),
        Change("logo", logo="REPOST"),
    ]
    # Within the duplicates stage's max_distance (16 bits) of the original.
    for change in changes:
        assert hamming(frame_hash(changed(original, change)).value, hashed.value) <= 16
    assert hamming(frame_hash(jpeg(original, 10)).value, hashed.value) <= 16
    others = [frame_hash(picture(seed)).value for seed in range(2, 12)]
    assert min(hamming(other, hashed.value) for other in others) > 16


def test_the_mirrors_hash_is_read_off_the_original() -> None:
    original = picture(3)
    mirrored = frame_hash(np.ascontiguousarray(original[:, ::-1]))
    hashed = frame_hash(original)
    assert hamming(mirrored.value, hashed.mirror) <= 2
    assert hamming(hashed.value, hashed.mirror) > 8  # the mirror is another picture


def test_a_black_or_one_colour_picture_is_flat() -> None:
    assert frame_hash(np.zeros((360, 640, 3), dtype=np.uint8)).flat
    assert frame_hash(np.full((360, 640, 3), 200, dtype=np.uint8)).flat
    grey = np.asarray(PILImage.fromarray(picture(4)).convert("L"), dtype=np.float64)
    assert grey.std() > FLAT_STD
    assert not frame_hash(picture(4)).flat


def test_weak_bits_are_twelve_and_the_json_round_trips() -> None:
    hashed = frame_hash(picture(5))
    assert hashed.weak.bit_count() == 12
    assert hashed.value >> 63 == 0  # the DC term's place is never set
    assert FrameHash.from_json(hashed.to_json()) == hashed
