"""What the speech stage's audio event detector costs, and what it hears.

    python -m bench.perf.audio_events_cost [--seconds 60] [--runs 5] [--json OUT]

``models.audio_events`` on a clip of ``devkit.music_videos``' melody and on the same length of
silence, one thread (the model runs on the calling thread): the median CPU seconds per second
of audio over ``runs`` passes, the model's load, and the events found in the melody. The speech
stage runs it on every window beside Whisper (``bench.perf.stage_cost`` charges both to
``speech``); this is its share.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from bench.runs import emit
from devkit.music_videos import melody
from models.audio_events import SAMPLE_RATE, AudioEventDetector


def audio_events_cost(seconds: float = 60.0, runs: int = 5) -> dict[str, object]:
    detector = AudioEventDetector()
    started = time.process_time()
    detector.load()
    load_cpu_s = time.process_time() - started
    clips = {
        "melody": melody(seconds),
        "silence": np.zeros(round(seconds * SAMPLE_RATE), np.float32),
    }
    figures: dict[str, object] = {
        "model": detector.model_id,
        "audio_s": seconds,
        "runs": runs,
        "load_cpu_s": round(load_cpu_s, 3),
    }
    try:
        for name, samples in clips.items():
            times: list[float] = []
            for _ in range(runs):
                started = time.process_time()
                events = detector.detect(samples)
                times.append(time.process_time() - started)
            figures[name] = {
                "cpu_s_per_audio_s": round(statistics.median(times) / seconds, 5),
                "events": [
                    {"kind": e.kind, "seconds": round(e.end_s - e.start_s, 2)} for e in events
                ],
            }
    finally:
        detector.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    emit(audio_events_cost(args.seconds, args.runs), args.json)


if __name__ == "__main__":
    main()
