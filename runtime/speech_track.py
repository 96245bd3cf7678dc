"""A video's speech during one attempt: taken from its earlier result, restored from the
windows an interrupted attempt persisted, or heard now from the ingest stream.

Each window's transcript is persisted (``ChunkStore.put_speech``) as it arrives, so a video
resumed after a crash recognises only the windows after the last one persisted; the track's
end is persisted too, after which nothing is recognised again. A speech result whose stage
version is the current one is taken as it is from the video's earlier result (a new OCR
model, say, does not make speech run again).
"""

from __future__ import annotations

import asyncio
import logging

from checkpoint.chunk_store import ChunkStore, chunk_origin
from core.errors import RetryableError
from core.records import EarlierResult, VideoRef
from core.speech import Speech, SpeechEnd, SpeechItem, SpeechPart
from core.stage_names import SPEECH
from runtime.video_run import VideoRun
from stages.pipeline import Lineage

log = logging.getLogger(__name__)


class SpeechTrack:
    """What an attempt knows of a video's speech, and where recognition has to start."""

    def __init__(
        self,
        run: VideoRun,
        version: str,
        chunks: ChunkStore | None,
        *,
        taken: Speech | None = None,
        parts: dict[int, SpeechPart] | None = None,
        end: SpeechEnd | None = None,
    ) -> None:
        self._run = run
        self._version = version
        self._chunks = chunks
        self._taken = taken
        self._parts = parts or {}
        self._end = end

    @classmethod
    async def start(
        cls,
        run: VideoRun,
        lineage: Lineage,
        earlier: EarlierResult | None,
        chunks: ChunkStore | None,
    ) -> SpeechTrack | None:
        """The video's track for this attempt; None when speech is not recognised."""
        if not lineage.speech:
            return None
        ref: VideoRef = run.ref
        if (
            earlier is not None
            and earlier.speech is not None
            and earlier.uri == ref.uri
            and lineage.speech_reusable(earlier.stage_versions)
        ):
            log.info("video %s: taking speech from its result", ref.video_id)
            return cls(run, lineage.version, chunks, taken=earlier.speech)
        if chunks is None:
            return cls(run, lineage.version, None)
        parts, end = await asyncio.to_thread(
            chunks.speech, ref.video_id, lineage.version, chunk_origin(ref)
        )
        track = cls(run, lineage.version, chunks, parts=parts, end=end)
        if parts or end:
            log.info(
                "video %s: resuming speech with %d windows done%s",
                ref.video_id,
                track.contiguous,
                ", to its end" if track.complete else "",
            )
            await track._progress()
        return track

    @property
    def contiguous(self) -> int:
        """Windows persisted without a gap from the first."""
        count = 0
        while count in self._parts:
            count += 1
        return count

    @property
    def complete(self) -> bool:
        return self._taken is not None or (
            self._end is not None and self.contiguous >= self._end.parts
        )

    @property
    def recognise_from(self) -> int | None:
        """The window recognition starts at; None when nothing is left to recognise."""
        return None if self.complete else self.contiguous

    async def take(self, item: SpeechItem) -> None:
        """One item of the ingest stream: persisted, then counted."""
        if self._chunks is not None:
            origin = chunk_origin(self._run.ref)
            await asyncio.to_thread(self._chunks.put_speech, self._version, item, origin)
        if isinstance(item, SpeechEnd):
            self._end = item
        else:
            self._parts[item.index] = item
            self._run.timings[SPEECH] += item.seconds
        await self._progress()

    async def _progress(self) -> None:
        end = self._end
        total = end.parts if end is not None else None
        # A video without an audio track has no speech to recognise: not 0 of 0 windows, but
        # nothing to do, which every progress view shows as such and counts as finished.
        applicable = end is None or end.has_audio
        await self._run.progress(SPEECH, len(self._parts), total, applicable=applicable)

    def speech(self) -> Speech:
        """The video's speech, once the track is complete."""
        if self._taken is not None:
            return self._taken
        if self._end is None or not self.complete:
            raise RetryableError(
                f"the speech of {self._run.ref.video_id} ended without its last windows",
                code="internal_error",
            )
        parts = [self._parts[index] for index in range(self._end.parts)]
        return Speech.assemble(parts, self._end)
