"""The video stages on a video's assembled result, before its final write.

They run in the process that orchestrates the video (the service's orchestrator, a backfill
actor), on a thread of their own, one video at a time each: they read a result, never pixels,
so they are cheap beside what made the result. A video processed again takes each video
stage's output from its earlier result where the stage's version is unchanged
(``Lineage.video_reusable``); a video stage added to finished videos runs on their stored
results, and nothing is decoded for it (``runtime.reuse``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from core.errors import DependencyUnavailable
from core.outputs import VideoOutput
from core.records import VideoResult
from runtime.metrics import PipelineMetrics
from stages.base import VideoStage
from stages.errors import StageFailed

log = logging.getLogger(__name__)


class VideoStages:
    """Runs the video stages in the pipeline's order, which is their reading order: a later
    one may read an earlier one's output (``result.outputs``)."""

    def __init__(
        self, stages: Sequence[VideoStage], metrics: PipelineMetrics | None = None
    ) -> None:
        """``metrics``: where each stage's calls are counted, as the frames stages' are
        (``reelsense_stage_*``, by stage)."""
        self._stages = tuple(stages)
        self._metrics = metrics or PipelineMetrics()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="video-stages")
        self._set_up: set[str] = set()  # touched on that thread only

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self._stages)

    async def run(
        self,
        result: VideoResult,
        taken: Mapping[str, VideoOutput],
        advance: Callable[[str, int], Awaitable[None]],
    ) -> VideoResult:
        """``result`` with every video stage's output: ``taken`` (from its earlier result)
        where given, computed otherwise; each computed one's seconds in its timings.
        ``advance(stage, done)`` records each stage's progress (0 or 1 of 1). Raises
        ``StageFailed`` when a stage fails, and a ``DependencyUnavailable`` it raises as it is
        (a store it reads is down: the attempt is retried, not the video failed)."""
        if not self._stages:
            return result
        outputs = {name: taken[name] for name in self.names if name in taken}
        timings = dict(result.timings)
        for stage in self._stages:
            if stage.name in outputs:
                await advance(stage.name, 1)
                continue
            await advance(stage.name, 0)
            current = replace(result, outputs=dict(outputs))
            started = time.monotonic()
            loop = asyncio.get_running_loop()
            self._metrics.stage_sent(stage.name)
            try:
                outputs[stage.name] = await loop.run_in_executor(
                    self._thread, self._run, stage, current
                )
            finally:
                timings[stage.name] = time.monotonic() - started
                ok = stage.name in outputs
                frames = len(result.frames)
                self._metrics.stage_returned(stage.name, frames, timings[stage.name], ok=ok)
            await advance(stage.name, 1)
        return replace(result, outputs=outputs, timings=timings)

    async def close(self) -> None:
        """Release what the stages took (on their thread), then the thread."""
        loop = asyncio.get_running_loop()
        for stage in self._stages:
            if stage.name in self._set_up:
                await loop.run_in_executor(self._thread, stage.teardown)
        self._thread.shutdown(wait=True)

    def _run(self, stage: VideoStage, result: VideoResult) -> VideoOutput:
        try:
            if stage.name not in self._set_up:
                stage.setup()
                self._set_up.add(stage.name)
            (output,) = stage.process_batch([result])
        except (StageFailed, DependencyUnavailable):
            raise
        except Exception as exc:
            log.exception("video stage %s failed on %s", stage.name, result.ref.video_id)
            raise StageFailed(f"{type(exc).__name__}: {exc}", stage=stage.name) from exc
        return output
