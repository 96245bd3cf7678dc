"""The shot boundaries PySceneDetect finds in the ``bench.quality`` corpus, scored the same way.

    pip install scenedetect opencv-python-headless   # not a dependency of reelsense
    python -m bench.quality.baseline [--workdir DIR] [--json OUT]

What a team would otherwise pick for shots: PySceneDetect's content detector (HSV change
between consecutive frames, threshold 27) and its adaptive detector (that change against its
neighbours'), with their defaults, over the same edits, with the same 0.2 s tolerance
(``bench.quality.score``). Its boundary is the first frame of the new scene, for a cut and a
transition alike. The CPU time is this process's, for the whole corpus.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.quality.corpus import corpus, write_corpus
from bench.quality.score import score_shots
from bench.runs import emit

_DETECTORS = ("ContentDetector", "AdaptiveDetector")


def measure(workdir: Path) -> dict[str, Any]:
    import scenedetect  # optional: only this benchmark needs it

    truths = write_corpus(corpus(quick=False), workdir / "videos")
    report: dict[str, Any] = {"scenedetect": scenedetect.__version__}
    for name in _DETECTORS:
        started = time.process_time()
        scores = []
        for truth in truths:
            scenes = scenedetect.detect(str(truth.path), getattr(scenedetect, name)())
            found = [(start.get_seconds(), "cut") for start, _ in scenes[1:]]
            scores.append(score_shots(truth, found))
        total = sum(scores[1:], scores[0])
        report[name] = {
            **total.summary(),
            "cpu_s": round(time.process_time() - started, 2),
            "video_s": round(sum(t.duration_s for t in truths), 1),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reelsense-baseline-") as tmp:
        report = measure(args.workdir or Path(tmp))
    emit(report, args.json)


if __name__ == "__main__":
    main()
