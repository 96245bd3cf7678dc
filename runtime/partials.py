"""Partial results: a long video is findable while it is still being analysed.

Each chunk whose stages are done, and each window of speech recognised, becomes a result of its
own (its frames or its sentences, at their times in the video), marked partial. A video's parts
are held and go to the search index together, every ``runtime.partial_results_every_s`` of its
analysis: a video done sooner writes none (its final write is what makes it findable, and
writing its parts would only double the index's work), and a long one costs one commit per
period rather than one per chunk. The index merges parts by key and removes nothing; the video's
final write makes its rows exactly those of the whole result (a text span cut by a chunk edge is
one row again, nothing stays partial), and a video that fails has its partial rows removed.
Partial writes are best effort: a failure is logged and costs only how soon a video is found.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import UTC, datetime

from core.records import Chunk, Frame, ProbeInfo, VideoResult
from core.speech import Speech, SpeechPart
from core.tasks import cancel_and_wait
from runtime.results import ResultStore
from runtime.video_run import VideoRun

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Held:
    """The parts of one attempt at one video not written yet, and the task that writes them."""

    parts: list[VideoResult] = dataclasses.field(default_factory=list)
    flushing: asyncio.Task[None] | None = None


class PartialResults:
    """Holds the parts of videos in analysis and hands them to the result store.

    ``every_s``: how long parts wait for company (0: each is written at once); None: parts are
    not written at all.
    """

    def __init__(self, results: ResultStore, version: str, *, every_s: float | None) -> None:
        self._results = results
        self._version = version
        self.every_s = every_s
        self._held: dict[int, _Held] = {}  # by id of the VideoRun

    @property
    def enabled(self) -> bool:
        return self.every_s is not None

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
            await self._hold(run, self._part(run, probe, bare, None))

    async def speech(self, run: VideoRun, part: SpeechPart) -> None:
        if self.enabled and run.probe is not None and (part.segments or part.events):
            speech = Speech("done", part.segments, language=part.language, events=part.events)
            await self._hold(run, self._part(run, run.probe, [], speech))

    async def settle(self, run: VideoRun) -> None:
        """The attempt ended (done, failed or given up): its held parts are not written."""
        held = self._held.pop(id(run), None)
        if held is not None and held.flushing is not None:
            await cancel_and_wait(held.flushing)

    async def drop(self, video_id: str) -> None:
        """The video will not be done: its partial rows go."""
        if self.enabled:
            try:
                await self._results.drop_partial(video_id)
            except Exception as exc:
                log.warning("video %s: partial results not removed: %s", video_id, exc)

    def _part(
        self, run: VideoRun, probe: ProbeInfo, frames: list[Frame], speech: Speech | None
    ) -> VideoResult:
        return VideoResult(
            ref=run.ref,
            pipeline_version=self._version,
            probe=probe,
            frames=frames,
            completed_at=datetime.now(UTC),  # analysed now: the writer measures from here
            epoch=run.epoch,
            speech=speech,
        )

    async def _hold(self, run: VideoRun, part: VideoResult) -> None:
        if not self.every_s:
            await self._write(run, [part])
            return
        held = self._held.setdefault(id(run), _Held())
        held.parts.append(part)
        if held.flushing is None:
            held.flushing = asyncio.create_task(self._flushing(run, held, self.every_s))

    async def _flushing(self, run: VideoRun, held: _Held, every_s: float) -> None:
        """Every ``every_s`` from the first part on, the parts that came meanwhile, together."""
        while True:
            await asyncio.sleep(every_s)
            parts, held.parts = held.parts, []
            if parts:
                await self._write(run, parts)

    async def _write(self, run: VideoRun, parts: list[VideoResult]) -> None:
        try:
            await self._results.write_partial(parts)
        except Exception as exc:
            log.warning("video %s: partial result not written: %s", run.ref.video_id, exc)
