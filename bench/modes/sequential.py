"""Sequential baseline: the same stage classes, one process, one video after another.

    python -m bench.modes.sequential SPEC OUT

``spec.threads`` picks the library threading: ``single`` (one thread everywhere: the per-stage
CPU cost the bottleneck bound is computed from), ``tuned`` (thread pools sized to the cores),
``defaults`` (the libraries' own choices). Each stage call is timed for the timeline; stage
CPU is process CPU time (every thread of the process counts).
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.modes.common import (
    Activity,
    ModeResult,
    RunSpec,
    local_config,
    now,
    quiet_environment,
    thread_counts,
)
from core.records import VideoRef
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

    def stream(self, item: Any) -> Iterator[Any]:
        chunks = self._stream(item)
        while True:
            start = now()
            chunk = next(chunks, None)
            self._record(start, len(chunk.frames) if chunk is not None else 0)
            if chunk is None:
                return
            yield chunk

    def _record(self, start: float, items: int) -> None:
        self._timeline.append(Activity(self._lane, self._stage.name, start, now(), items))


def run(spec: RunSpec) -> ModeResult:
    threads = thread_counts(spec.threads)
    config = local_config(spec, **threads)
    pipeline = Pipeline.from_config(config)
    runner = SequentialRunner(pipeline)
    started = time.monotonic()
    runner.setup()
    if spec.warmup:
        runner.run_one(VideoRef(video_id="warmup", uri=Path(spec.warmup).as_uri()))
    setup_s = time.monotonic() - started
    timeline: list[Activity] = []
    for stage in pipeline.all_stages():
        _Timed(stage, "main", timeline)
    cpu: dict[str, float] = defaultdict(float)
    submitted: dict[str, float] = {}
    done: dict[str, float] = {}
    per_video_cpu: dict[str, float] = {}
    frames = 0
    window_start = now()
    for video in spec.videos:
        submitted[video.video_id] = window_start  # a batch: every video is there at once
        ref = VideoRef(video_id=video.video_id, uri=Path(video.path).as_uri())
        result = runner.run_one(ref)
        done[video.video_id] = now()
        frames += len(result.frames)
        for stage_name, seconds in result.timings.items():
            cpu[stage_name] += seconds
        per_video_cpu[video.video_id] = sum(result.timings.values())
    window_end = now()
    runner.teardown()
    return ModeResult(
        mode=spec.mode,
        setting={"threads": spec.threads, **threads},
        window_start=window_start,
        window_end=window_end,
        submitted=submitted,
        done=done,
        frames=frames,
        setup_s=setup_s,
        stage_cpu_s=dict(cpu),
        timeline=timeline,
        extra={"cpu_s_per_video": per_video_cpu},
    )


def main() -> None:
    quiet_environment()
    spec = RunSpec.from_json(Path(sys.argv[1]).read_text())
    run(spec).write(Path(sys.argv[2]))


if __name__ == "__main__":
    main()
