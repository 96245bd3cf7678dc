"""Progress bookkeeping of one attempt at one video: chunks seen, stages done, time spent."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Awaitable

from checkpoint.base import CheckpointStore
from core.errors import ReelsenseError
from core.records import Chunk, LocalVideo, ProbeInfo, VideoRef
from runtime.executor import FusedOutputs
from runtime.lease import Heartbeat
from runtime.metrics import PipelineMetrics


class VideoRun:
    """One attempt at one video: what was decoded, what each stage finished, their times."""

    def __init__(
        self,
        ref: VideoRef,
        epoch: int,
        store: CheckpointStore,
        metrics: PipelineMetrics,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        """``heartbeat``: beaten at every sign of progress, so the attempt's lease is renewed
        while it progresses (``runtime.lease``)."""
        self.ref = ref
        self.heartbeat = heartbeat or Heartbeat()
        self.metrics = metrics
        self.epoch = epoch
        self.store = store
        self.seen: set[int] = set()
        self.total: int | None = None
        self.done: dict[str, int] = defaultdict(int)
        self.timings: dict[str, float] = defaultdict(float)
        self.probe: ProbeInfo | None = None  # once the video is open

    def probe_of(self, video: LocalVideo) -> LocalVideo:
        """The video, now open: its probe is kept for the parts of its result."""
        self.probe = video.probe
        return video

    @property
    def decoded_count(self) -> int:
        return len(self.seen)

    def decoded(self, index: int, last: bool) -> None:
        self.heartbeat.beat()
        self.seen.add(index)
        if last:
            self.total = index + 1

    def restored(self, chunk: Chunk) -> None:
        self.decoded(chunk.index, chunk.last)

    async def progress(
        self, stage: str, done: int, total: int | None, *, applicable: bool = True
    ) -> None:
        """``applicable=False``: ``stage`` has nothing to do for this video."""
        self.heartbeat.beat()
        await self.store.advance(
            self.ref.video_id, self.epoch, stage, done, total, applicable=applicable
        )

    async def stage_done(self, stage: str) -> None:
        self.done[stage] += 1
        await self.progress(stage, self.done[stage], self.total)

    async def timed(self, stage: str, work: Awaitable[Chunk], frames: int = 0) -> Chunk:
        """``work``, a call of ``stage``: its time and outcome recorded, its error blamed on
        the stage."""
        started = time.monotonic()
        self.metrics.stage_sent(stage)
        ok = False
        try:
            result = await work
            ok = True
            return result
        except ReelsenseError as exc:
            exc.with_stage(stage)
            raise
        finally:
            self.heartbeat.beat()
            self._returned(stage, frames, time.monotonic() - started, ok=ok)

    def record_fused(self, fused: FusedOutputs, frames: int) -> None:
        """The stages the decoder ran on a chunk before handing it over, and what each took."""
        for stage, seconds in fused.seconds.items():
            self.metrics.stage_sent(stage)
            self._returned(stage, frames, seconds, ok=True)

    def _returned(self, stage: str, frames: int, seconds: float, *, ok: bool) -> None:
        self.timings[stage] += seconds
        self.metrics.stage_returned(stage, frames, seconds, ok=ok)
