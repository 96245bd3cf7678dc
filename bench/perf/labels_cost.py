"""What the labels stage's classifier costs, on onnxruntime against torch, and what it finds.

    python -m bench.perf.labels_cost [--frames 40] [--json OUT]

EfficientNet-Lite0 on 720p frames (darknet's photographs scaled to 1280 x 720, as a sample
reaches the stage), one thread: the ONNX export (once per weights, cached), a start from the
cache, and milliseconds per frame with onnxruntime (what the stage runs) and with the same
network in torch eager (what a user would otherwise write), the frame's scaling included in
both; then the labels the ``shot_labels`` stage gives a video of slow pans over each photograph
(``kind_found``: whether the kind it shows is among them).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from bench.runs import emit
from core.config import ServiceConfig
from core.records import VideoRef
from devkit.photo_pans import DARKNET_SUBJECTS, darknet_photo, write_pans
from models.labels import ImageClassifier, network_input, weights
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner


def _frames(count: int) -> list[np.ndarray]:
    photos = [PILImage.open(darknet_photo(name)).convert("RGB") for name in DARKNET_SUBJECTS]
    return [np.asarray(photos[i % len(photos)].resize((1280, 720))) for i in range(count)]


def onnx_cost(frames: list[np.ndarray], cache: Path) -> dict[str, float]:
    started = time.monotonic()
    ImageClassifier(cache_dir=cache).load()  # exports into the empty cache
    export_s = time.monotonic() - started
    engine = ImageClassifier(cache_dir=cache)
    started = time.monotonic()
    engine.load()
    load_s = time.monotonic() - started
    engine.probabilities(frames[:2])  # warm
    started = time.process_time()
    for frame in frames:
        engine.probabilities([frame])
    per_frame = (time.process_time() - started) / len(frames)
    return {
        "export_s": round(export_s, 2),
        "load_from_cache_s": round(load_s, 3),
        "cpu_ms_per_frame": round(1000 * per_frame, 2),
    }


def torch_cost(frames: list[np.ndarray]) -> dict[str, float]:
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    torch.set_num_threads(1)
    started = time.monotonic()
    network = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights()[0]))
    network.eval()
    load_s = time.monotonic() - started
    with torch.no_grad():
        network(torch.from_numpy(network_input(frames[0])[None]))  # warm
        started = time.process_time()
        for frame in frames:
            network(torch.from_numpy(network_input(frame)[None]))
        per_frame = (time.process_time() - started) / len(frames)
    return {"load_s": round(load_s, 2), "cpu_ms_per_frame": round(1000 * per_frame, 2)}


def labelled_pans(workdir: Path) -> list[dict[str, object]]:
    path = write_pans(workdir / "pans.mp4", [darknet_photo(n) for n in DARKNET_SUBJECTS])
    config = ServiceConfig.load(
        asr={"enabled": False},
        limits={"file_roots": [str(workdir)]},
        stages={"labels": {"cache_dir": str(workdir / "cache")}},
    )
    runner = SequentialRunner(Pipeline.from_config(config))
    runner.setup()
    try:
        result = runner.run_one(VideoRef(video_id="pans", uri=path.as_uri()))
    finally:
        runner.teardown()
    segments = {round(s.start_s): s for s in result.outputs["shot_labels"].segments}
    found = []
    for shot, (photo, kind) in enumerate(DARKNET_SUBJECTS.items()):
        segment = segments.get(shot * 3)
        labels = segment.attributes["labels"] if segment else []
        found.append(
            {
                "photo": photo,
                "expected_kind": kind,
                "labels": [(label["name"], label["score"]) for label in labels],
                "kind_found": kind in [label["name"] for label in labels],
            }
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    frames = _frames(args.frames)
    with tempfile.TemporaryDirectory(prefix="reelsense-labels-") as scratch:
        workdir = Path(scratch)
        onnx = onnx_cost(frames, workdir / "cache")
        shots = labelled_pans(workdir)
    torch = torch_cost(frames)
    report = {
        "frames": len(frames),
        "onnxruntime": onnx,
        "torch_eager": torch,
        "onnx_speedup": round(torch["cpu_ms_per_frame"] / onnx["cpu_ms_per_frame"], 2),
        "shots": shots,
        "kinds_found": sum(bool(s["kind_found"]) for s in shots),
    }
    emit(report, args.json)


if __name__ == "__main__":
    main()
