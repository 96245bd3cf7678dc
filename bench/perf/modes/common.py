"""What every benchmark mode shares: the run description, the videos, the configuration.

A mode runs in a process of its own (``python -m bench.perf.modes.<mode> SPEC OUT``) so that library
thread pools, Ray and peak memory of one mode never leak into another; the orchestrator
(``bench.perf.pipeline``) samples that process tree from outside.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import av

from core.config import ServiceConfig
from devkit.samples import write_long_video

SIZE_720P = (1280, 720)


@dataclass(frozen=True)
class VideoSpec:
    """One input video of the run."""

    video_id: str
    path: str
    seconds: float


@dataclass
class RunSpec:
    """What a mode process is asked to do (written as JSON by the orchestrator)."""

    mode: str
    workdir: str
    videos: list[VideoSpec]
    sample_fps: float = 1.0
    ocr_det_limit_side: int = 640
    chunk_frames: int = 8
    sample_mode: str = "fps"  # StageSettings.sample_mode
    skip_nonref_frames: bool = False  # StageSettings.skip_nonref_frames
    speech: bool = False  # the videos talk: modes that need a stage of their own for it add one
    threads: str = "single"  # single | tuned | defaults (sequential modes)
    setting: dict[str, Any] = field(default_factory=dict)  # mode-specific knobs
    warmup: str | None = None  # a short video processed before the measured window

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        data = json.loads(text)
        data["videos"] = [VideoSpec(**v) for v in data["videos"]]
        return cls(**data)


@dataclass
class Activity:
    """One stretch of work of one stage on one lane (a thread, an actor, a replica)."""

    lane: str
    stage: str
    start: float  # time.time()
    end: float
    items: int = 0


@dataclass
class ModeResult:
    """What a mode process reports back (JSON). Times are ``time.time()`` values."""

    mode: str
    setting: dict[str, Any]
    window_start: float  # first video handed to the pipeline
    window_end: float  # last result durable
    submitted: dict[str, float]  # video_id -> when it was handed over
    done: dict[str, float]  # video_id -> when its results were durable
    frames: int
    setup_s: float = 0.0  # model loading etc. before the window
    stage_cpu_s: dict[str, float] = field(default_factory=dict)  # process CPU per stage
    # Where stage CPU is not timed in-process: titles (substrings) of the processes doing
    # stage work, whose sampled CPU is the stages' cost.
    stage_processes: list[str] = field(default_factory=list)
    timeline: list[Activity] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> ModeResult:
        data = json.loads(path.read_text())
        data["timeline"] = [Activity(**a) for a in data.get("timeline", [])]
        return cls(**data)


# -- videos ------------------------------------------------------------------------------------


def _write_one(path: str, seconds: float, size: tuple[int, int], grain: float, seed: int) -> str:
    tmp = Path(path).with_suffix(".part.mp4")
    write_long_video(tmp, seconds, size=size, grain=grain, seed=seed)
    tmp.rename(path)
    return path


def bench_videos(
    cache: Path,
    count: int,
    seconds: float,
    *,
    size: tuple[int, int] = SIZE_720P,
    grain: float = 6.0,
    prefix: str = "bench",
    speech: bool = False,
) -> list[VideoSpec]:
    """``count`` distinct videos (one seed each), generated once and kept under ``cache``.

    Encoding 720p grain costs about as much CPU as processing it, so the files are reused
    from run to run; two encoders run side by side when more than one is missing. With
    ``speech`` each video talks throughout (``talking_copy``), in a file of its own name.
    """
    cache.mkdir(parents=True, exist_ok=True)
    width, height = size
    tag = f"{seconds:g}s-{width}x{height}-g{grain:g}"
    paths = [cache / f"{prefix}-{tag}-{seed}.mp4" for seed in range(count)]
    talking = [cache / f"{prefix}-{tag}-talk-{seed}.mp4" for seed in range(count)]
    wanted = [p for p, t in zip(paths, talking, strict=True) if not (speech and t.exists())]
    missing = [(str(p), seed) for seed, p in enumerate(paths) if p in wanted and not p.exists()]
    if len(missing) == 1:
        _write_one(missing[0][0], seconds, size, grain, missing[0][1])
    elif missing:
        with ProcessPoolExecutor(max_workers=min(2, cores())) as pool:
            futures = [
                pool.submit(_write_one, path, seconds, size, grain, seed) for path, seed in missing
            ]
            for future in futures:
                future.result()
    if speech:
        for silent, target in zip(paths, talking, strict=True):
            talking_copy(silent, target, seconds)
        paths = talking
    return [
        VideoSpec(video_id=f"{prefix}-{i}", path=str(p.resolve()), seconds=seconds)
        for i, p in enumerate(paths)
    ]


def talking_copy(source: Path, target: Path, seconds: float) -> Path:
    """``source`` with espeak-ng sentences on its audio track, one every few seconds from start
    to end (``bench.perf.stage_cost.talk``, as the speech cost is measured); its video packets are
    copied, so the frames cost what the silent video's do."""
    if target.exists():
        return target
    # Imported here: only runs with speech need espeak-ng and the quality corpus's sentences.
    from bench.perf.stage_cost import talk
    from devkit.speech_videos import speak_over

    part = target.with_suffix(".part.mp4")
    with tempfile.TemporaryDirectory(prefix="rs-talk-") as wavs:
        speak_over(source, talk(seconds), part, Path(wavs))
    part.rename(target)
    return target


def repeated_video(source: Path, target: Path, repeats: int) -> Path:
    """``source`` played ``repeats`` times in a row, remuxed without re-encoding.

    A 10 min 720p grain video would take many CPU-minutes to encode; concatenating the
    packets of a short one (every copy starts on its key frame) gives the same content per
    second, so the same decoding cost per second, in the time it takes to copy the bytes.
    """
    if target.exists():
        return target
    part = target.with_suffix(".part.mp4")
    with av.open(str(source)) as src, av.open(str(part), mode="w") as dst:
        in_stream = src.streams.video[0]
        out_stream = dst.add_stream_from_template(in_stream)
        span = None
        for copy in range(repeats):
            src.seek(0, stream=in_stream)
            last_end = 0
            for packet in src.demux(in_stream):
                if packet.dts is None:
                    continue
                if span is not None:
                    packet.pts = (packet.pts or 0) + copy * span
                    packet.dts += copy * span
                last_end = max(last_end, (packet.pts or 0) + (packet.duration or 0))
                packet.stream = out_stream
                dst.mux(packet)
            if span is None:
                span = last_end
    part.rename(target)
    return target


# -- configuration -----------------------------------------------------------------------------


def stage_overrides(
    spec: RunSpec, *, ocr_threads: int = 1, embed_threads: int = 1, decode_threads: int = 1
) -> dict[str, Any]:
    return {
        "sample_fps": spec.sample_fps,
        "ocr": {"det_limit_side": spec.ocr_det_limit_side, "threads": ocr_threads},
        "chunk_frames": spec.chunk_frames,
        "sample_mode": spec.sample_mode,
        "skip_nonref_frames": spec.skip_nonref_frames,
        "embed": {"threads": embed_threads},
        "decode_threads": decode_threads,
    }


def local_config(spec: RunSpec, *, asr_threads: int = 1, **stages: Any) -> ServiceConfig:
    """A configuration for the stages run in this process (sequential, Ray Data)."""
    roots = sorted({str(Path(v.path).parent) for v in spec.videos})
    if spec.warmup:
        roots.append(str(Path(spec.warmup).parent))
    return ServiceConfig.load(
        limits={"file_roots": tuple(roots)},
        stages=stage_overrides(spec, **stages),
        asr={"cpu_threads": asr_threads},
        runtime={"workdir": str(Path(spec.workdir) / "work"), "executor": "local"},
    )


def thread_counts(threads: str) -> dict[str, int]:
    """Library threads per setting: ``single`` (the cost measurement), ``tuned`` (every core
    of the machine), ``defaults`` (what the libraries pick on their own)."""
    count = cores()
    if threads == "single":
        return {"ocr_threads": 1, "embed_threads": 1, "decode_threads": 1, "asr_threads": 1}
    if threads == "tuned":
        return {
            "ocr_threads": count,
            "embed_threads": count,
            "decode_threads": count,
            "asr_threads": count,
        }
    # onnxruntime's default pool (-1 in RapidOCR: onnxruntime picks, spinning threads),
    # torch's default (one thread per core), faster-whisper's (4); the decoder keeps its own.
    return {"ocr_threads": -1, "embed_threads": count, "decode_threads": 0, "asr_threads": 4}


def cores() -> int:
    """CPUs this process may run on (a CPU set or ``taskset`` narrows them)."""
    return len(os.sched_getaffinity(0)) or 1


def mode_main(run: Callable[[RunSpec], ModeResult]) -> None:
    """A mode process: ``python -m bench.perf.modes.<mode> SPEC OUT`` runs ``run`` on the spec
    read from SPEC and writes its result to OUT."""
    quiet_environment()
    spec = RunSpec.from_json(Path(sys.argv[1]).read_text())
    run(spec).write(Path(sys.argv[2]))


def start_local_ray(spec: RunSpec, cpus: int) -> None:
    """A local Ray for a mode's own actors, with the service's local settings: no dashboard,
    the run's temporary folder (``RAY_TMPDIR``, else one in the mode's workdir), quiet."""
    import ray

    from runtime.cluster import lighten_local_ray

    lighten_local_ray()
    ray.init(
        include_dashboard=False,
        num_cpus=cpus,
        _temp_dir=os.environ.get("RAY_TMPDIR") or str(Path(spec.workdir) / "ray"),
        log_to_driver=False,
        configure_logging=False,
    )


def quiet_environment() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def now() -> float:
    return time.time()
