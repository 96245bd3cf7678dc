"""A visual detector as a package outside the project would add one (the
``reelsense.detectors`` entry point ``red_square``): it finds the box of the pure red pixels in
a frame and labels it ``RED_SQUARE``, as a nudity detector would label what it finds."""

from __future__ import annotations

import numpy as np

from core.records import Image
from models.base import Detection


class RedSquares:
    """Labels ``RED_SQUARE`` the box around the frame's pure red pixels (none: nothing)."""

    name = "red_square"
    model_id = "red-square-1"

    def load(self) -> None:
        pass

    def close(self) -> None:
        pass

    def detect(self, image: Image) -> list[Detection]:
        red = (image[:, :, 0] > 200) & (image[:, :, 1] < 50) & (image[:, :, 2] < 50)
        rows, cols = np.nonzero(red)
        if rows.size < 100:
            return []
        box = (float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1))
        return [Detection("RED_SQUARE", 0.9, box)]
