"""What every mode of a benchmark run starts from: the bench videos, their sampling, and the
command-line options that pick them (shared by ``bench.perf.pipeline`` and
``bench.perf.rounds``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.perf.modes.common import RunSpec, bench_videos

ROOT = Path(__file__).resolve().parents[2]


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The videos, their sampling and how each mode runs: what ``bench_inputs`` and
    ``run_mode`` read, shared with ``bench.perf.rounds``."""
    parser.add_argument("--videos", type=int, help="number of videos (8; quick: 2)")
    parser.add_argument("--seconds", type=float, help="length of each video (20; quick: 6)")
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--grain", type=float, default=6.0)
    parser.add_argument(
        "--speech",
        action="store_true",
        help="the videos talk throughout (espeak-ng): speech recognition runs and is in the bound",
    )
    parser.add_argument(
        "--sample-mode",
        choices=("fps", "shots", "keyframes"),
        default="fps",
        help="stages.sample_mode (shots: one sample per 1/fps s and one at every shot start)",
    )
    parser.add_argument(
        "--skip-nonref",
        action="store_true",
        help="stages.skip_nonref_frames: the decoder leaves out unreferenced frames (B-frames)",
    )
    parser.add_argument("--chunk-frames", type=int, default=8)
    parser.add_argument("--cache", default=str(ROOT / ".reelsense" / "bench" / "videos"))
    parser.add_argument("--timeout", type=float, default=3600.0, help="per mode, seconds")
    parser.add_argument(
        "--idle-busy",
        type=float,
        default=0.25,
        help="before each mode, wait until other work keeps the machine busy less than this",
    )
    parser.add_argument(
        "--idle-wait", type=float, default=0.0, help="seconds of waiting allowed in all"
    )


def bench_inputs(
    args: argparse.Namespace, cache: Path, count: int, seconds: float
) -> tuple[RunSpec, str]:
    """The run spec every mode starts from (``count`` bench videos of ``seconds``, made once
    in ``cache``, and the sampling the arguments ask for), and the warm-up video."""
    size = tuple(int(x) for x in args.size.split("x"))
    talking = " talking throughout" if args.speech else ""
    print(
        f"videos: {count} x {seconds:g} s {args.size} grain {args.grain:g}{talking} (cache {cache})"
    )
    videos = bench_videos(
        cache,
        count,
        seconds,
        size=size,  # type: ignore[arg-type]
        grain=args.grain,
        speech=args.speech,
    )
    # The warm-up talks too: the speech model loads on the first video with an audio track.
    warmup = bench_videos(
        cache, 1, 2.0, size=(640, 360), grain=0.0, prefix="warmup", speech=args.speech
    )[0].path
    base = RunSpec(
        mode="",
        workdir="",
        videos=videos,
        chunk_frames=args.chunk_frames,
        sample_mode=args.sample_mode,
        skip_nonref_frames=args.skip_nonref,
        speech=args.speech,
    )
    return base, warmup
