"""What the ``faces`` visual detector costs a 720p sample.

    python -m bench.perf.faces_cost [--frames 8] [--runs 5] [--json OUT]

``models.faces`` (CenterFace, onnxruntime on one thread) on ``frames`` 1280 x 720 frames of
noise and on darknet's photographs scaled to 720p, each run ``runs`` times: the median CPU ms
a frame and the faces found, at the default input size (long side 640) and at 320. The
``detect`` stage runs it on every analysed sample where ``stages.review.detectors`` names
``faces``; it is off by default for this cost.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from bench.runs import emit
from devkit.photo_pans import darknet_photo
from models.faces import FaceDetector

PHOTOS = ("person", "kite", "horses", "dog")


def frames_720p(count: int) -> dict[str, list[np.ndarray]]:
    """Frames of noise (the network's cost does not depend on what a frame shows), and
    darknet's photographs where they are installed."""
    frames = {
        "noise": [
            np.random.default_rng(i).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
            for i in range(count)
        ]
    }
    with contextlib.suppress(FileNotFoundError):  # no photographs: noise only
        frames["photos"] = [
            np.asarray(PILImage.open(darknet_photo(n)).convert("RGB").resize((1280, 720)))
            for n in PHOTOS
        ]
    return frames


def faces_cost(frames: int = 8, runs: int = 5) -> dict[str, object]:
    pictures = frames_720p(frames)
    figures: dict[str, object] = {"frames": frames, "runs": runs}
    for long_side in (640, 320):
        detector = FaceDetector(long_side=long_side, threads=1)
        detector.load()
        try:
            for name, images in pictures.items():
                times: list[float] = []
                found = 0
                for image in images:
                    detector.find(image)  # the first run of a size sets up its buffers
                    for _ in range(runs):
                        started = time.process_time()
                        faces = detector.find(image)
                        times.append(time.process_time() - started)
                    found += len(faces)
                figures[f"{name}_{long_side}"] = {
                    "cpu_ms_per_frame": round(1000 * statistics.median(times), 1),
                    "faces_found": found,
                }
        finally:
            detector.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    emit(faces_cost(args.frames, args.runs), args.json)


if __name__ == "__main__":
    main()
