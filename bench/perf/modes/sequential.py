"""Sequential baseline: the same stage classes, one process, one video after another.

    python -m bench.perf.modes.sequential SPEC OUT

``spec.threads`` picks the library threading: ``single`` (one thread everywhere: the per-stage
CPU cost), ``tuned`` (thread pools sized to the cores), ``defaults`` (the libraries' own
choices). Each stage call is timed for the timeline; stage CPU is process CPU time (every thread
of the process counts).

``spec.setting["processes"]`` > 1 runs that many such processes at once, each taking the next
video from a shared queue once its models are loaded: with one single-threaded process per core
every core is busy with stage work and nothing else, so their per-stage CPU is what a video's
stage work costs when the machine is full (the bottleneck bound is computed from it).

``spec.setting["write"]``: each process also writes each video's results with the service's
sink writer (Lance frame and summary rows, search rows, result documents) before it takes the
next, each process to tables of its own (no commit of one waits for the other's): what a
process per core that keeps its results costs.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.perf.modes.common import (
    Activity,
    ModeResult,
    RunSpec,
    VideoSpec,
    local_config,
    mode_main,
    now,
    quiet_environment,
    thread_counts,
)
from core.config import ServiceConfig
from core.records import VideoRef
from models.embedding import text_embedder
from models.image_embedding import image_embedder
from sinks.writer import SinkWriter
from stages.base import Stage
from stages.pipeline import Pipeline
from stages.runner import SequentialRunner


class _Timed:
    """Wraps a stage's ``process_batch`` (and ``stream``) to record each call's wall span."""

    def __init__(self, stage: Stage[Any, Any], lane: str, timeline: list[Activity]) -> None:
        self._stage = stage
        self._lane = lane
        self._timeline = timeline
        self._process = stage.process_batch
        stage.process_batch = self.process_batch  # type: ignore[method-assign]
        stream = getattr(stage, "stream", None)
        if stream is not None:
            self._stream = stream
            stage.stream = self.stream  # type: ignore[attr-defined]

    def process_batch(self, items: Sequence[Any]) -> list[Any]:
        start = now()
        try:
            return self._process(items)
        finally:
            self._record(start, sum(len(getattr(i, "frames", ())) for i in items))

    def stream(self, item: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        """Decoding's chunks (items: their frames) or speech's windows (items: none)."""
        parts = self._stream(item, *args, **kwargs)
        while True:
            start = now()
            part = next(parts, None)
            self._record(start, len(getattr(part, "frames", ())))
            if part is None:
                return
            yield part

    def _record(self, start: float, items: int) -> None:
        self._timeline.append(Activity(self._lane, self._stage.name, start, now(), items))


def run(
    spec: RunSpec,
    videos: Iterable[VideoSpec] | None = None,
    *,
    ready: Callable[[], object] = lambda: None,
    lane: str = "main",
) -> ModeResult:
    """``videos``: what to process (default: the spec's, in order); ``ready`` is called once
    the models are loaded, just before the measured window."""
    processes = int(spec.setting.get("processes", 1))
    if videos is None and processes > 1:
        return _run_processes(spec, processes)
    threads = thread_counts(spec.threads)
    config = local_config(spec, **threads)
    pipeline = Pipeline.from_config(config)
    runner = SequentialRunner(pipeline)
    started = time.monotonic()
    runner.setup()
    writer = _writer(config, Path(spec.workdir) / lane) if spec.setting.get("write") else None
    if spec.warmup:
        warm = runner.run_one(VideoRef(video_id=f"warmup-{lane}", uri=Path(spec.warmup).as_uri()))
        if writer is not None:  # the tables made and the writer's model warm, as the service's
            writer.submit(warm).result()
    setup_s = time.monotonic() - started
    ready()
    timeline: list[Activity] = []
    for stage in pipeline.all_stages():
        _Timed(stage, lane, timeline)
    cpu: dict[str, float] = defaultdict(float)
    submitted: dict[str, float] = {}
    done: dict[str, float] = {}
    per_video_cpu: dict[str, float] = {}
    frames = written = 0
    window_start = now()
    for video in spec.videos if videos is None else videos:
        submitted[video.video_id] = window_start  # a batch: every video is there at once
        ref = VideoRef(video_id=video.video_id, uri=Path(video.path).as_uri())
        result = runner.run_one(ref)
        if writer is not None:
            writer.submit(result).result()
            written += 1
        done[video.video_id] = now()
        frames += len(result.frames)
        for stage_name, seconds in result.timings.items():
            cpu[stage_name] += seconds
        per_video_cpu[video.video_id] = sum(result.timings.values())
    window_end = now()
    runner.teardown()
    if writer is not None:
        writer.close()
    return ModeResult(
        mode=spec.mode,
        setting={**spec.setting, "threads": spec.threads, **threads},
        window_start=window_start,
        window_end=window_end,
        submitted=submitted,
        done=done,
        frames=frames,
        setup_s=setup_s,
        stage_cpu_s=dict(cpu),
        timeline=timeline,
        extra={"cpu_s_per_video": per_video_cpu, "videos_written": written},
    )


def _writer(config: ServiceConfig, root: Path) -> SinkWriter:
    """The service's sink writer on tables under ``root``."""
    storage = config.storage.model_copy(
        update={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")}
    )
    text_model = text_embedder(config.stages.embed.model, threads=config.stages.embed.threads)
    return SinkWriter.from_settings(
        storage, text_model=text_model, image_model=image_embedder(config.stages)
    )


def _run_processes(spec: RunSpec, processes: int) -> ModeResult:
    """``processes`` runners at once (fresh interpreters)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    for index in range(len(spec.videos)):
        queue.put(index)
    for _ in range(processes):
        queue.put(None)
    ready = context.Barrier(processes)
    outs = [Path(spec.workdir) / f"process-{n}.json" for n in range(processes)]
    workers = [
        context.Process(target=_worker, args=(spec.to_json(), queue, ready, f"process-{n}", out))
        for n, out in enumerate(outs)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    failed = [w.exitcode for w in workers if w.exitcode != 0]
    if failed:
        raise RuntimeError(f"sequential processes failed with exit codes {failed}")
    return merged([ModeResult.read(out) for out in outs])


def merged(parts: list[ModeResult]) -> ModeResult:
    """The runs of several runners at once as one: one window, from the first video any of
    them starts to the last one done."""
    start = min(part.window_start for part in parts)
    stage_cpu: dict[str, float] = defaultdict(float)
    for part in parts:
        for stage_name, seconds in part.stage_cpu_s.items():
            stage_cpu[stage_name] += seconds
    return replace(
        parts[0],
        window_start=start,
        window_end=max(part.window_end for part in parts),
        submitted={video: start for part in parts for video in part.submitted},
        done={video: at for part in parts for video, at in part.done.items()},
        frames=sum(part.frames for part in parts),
        setup_s=max(part.setup_s for part in parts),
        stage_cpu_s=dict(stage_cpu),
        timeline=[activity for part in parts for activity in part.timeline],
        extra={
            "cpu_s_per_video": {
                video: cpu for part in parts for video, cpu in part.extra["cpu_s_per_video"].items()
            },
            "videos_written": sum(part.extra["videos_written"] for part in parts),
        },
    )


def _worker(spec_json: str, queue: Any, ready: Any, lane: str, out: Path) -> None:
    quiet_environment()
    spec = RunSpec.from_json(spec_json)
    videos = (spec.videos[index] for index in iter(queue.get, None))
    try:
        run(spec, videos, ready=ready.wait, lane=lane).write(out)
    except BaseException:
        ready.abort()  # the others stop waiting for this one to load
        raise


if __name__ == "__main__":
    mode_main(run)
