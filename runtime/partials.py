"""Partial results: a long video is findable while it is still being analysed.

Each chunk whose stages are done, and each window of speech recognised, goes to the search
index at once as a result of its own (its frames or its sentences, at their times in the
video), marked partial. The index merges them by key and removes nothing; the video's final
write makes its rows exactly those of the whole result (a text span cut by a chunk edge is one
row again, nothing stays partial), and a video that fails has its partial rows removed.
Partial writes are best effort: a failure is logged and costs only how soon a video is found.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime

from core.records import Chunk, Frame, ProbeInfo, VideoResult
from core.speech import Speech, SpeechPart
from runtime.executor import StageExecutor
from runtime.video_run import VideoRun

log = logging.getLogger(__name__)


class PartialResults:
    """Hands the parts of videos in analysis to the executor's writer."""

    def __init__(self, executor: StageExecutor, version: str, *, enabled: bool) -> None:
        self._executor = executor
        self._version = version
        self.enabled = enabled

    async def chunk(self, run: VideoRun, chunk: Chunk) -> None:
        if self.enabled and run.probe is not None and chunk.frames:
            times = sorted(frame.timestamp_s for frame in chunk.frames)
            step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
            # The part ends one sample after its last frame, as its last text span does.
            probe = dataclasses.replace(run.probe, duration_s=times[-1] + step)
            # A part's rows are made of its text and times alone: its thumbnails and vectors
            # would cross to the writer for nothing (the video's final write carries them).
            bare = [
                dataclasses.replace(f, thumbnail=None, embedding=None, image_embedding=None)
                for f in chunk.frames
            ]
            await self._write(run, probe, bare, None)

    async def speech(self, run: VideoRun, part: SpeechPart) -> None:
        if self.enabled and run.probe is not None and part.segments:
            speech = Speech("done", part.segments, language=part.language)
            await self._write(run, run.probe, [], speech)

    async def drop(self, video_id: str) -> None:
        """The video will not be done: its partial rows go."""
        if self.enabled:
            try:
                await self._executor.drop_partial(video_id)
            except Exception as exc:
                log.warning("video %s: partial results not removed: %s", video_id, exc)

    async def _write(
        self, run: VideoRun, probe: ProbeInfo, frames: list[Frame], speech: Speech | None
    ) -> None:
        part = VideoResult(
            ref=run.ref,
            pipeline_version=self._version,
            probe=probe,
            frames=frames,
            completed_at=datetime.now(UTC),  # analysed now: the writer measures from here
            epoch=run.epoch,
            speech=speech,
        )
        try:
            await self._executor.write_partial(part)
        except Exception as exc:
            log.warning("video %s: partial result not written: %s", run.ref.video_id, exc)
