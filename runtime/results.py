"""``ResultStore``: the orchestration's one door to the stored results.

The processor reads a video's earlier result, makes its parts searchable while it is analysed
and writes its final result through this interface, and the deleter makes the sinks forget a
video through it; the stage executors only run stages. Two implementations reach the same
``runtime.result_writer.FencedResultWriter``: ``LocalResults`` holds it in this process (unit
tests, baselines, backfill), ``runtime.pools.results.RayResults`` calls the writer replica of
the pools application.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from core.config import ServiceConfig
from core.records import EarlierResult, VideoRef, VideoResult
from runtime.result_writer import FencedResultWriter
from sinks.writer import WriterStats


class ResultStore(ABC):
    """What the sinks hold of each video, and the writes that change it."""

    @abstractmethod
    async def earlier(self, video_id: str) -> EarlierResult | None:
        """What the sinks hold of the video's latest result, if anything."""

    @abstractmethod
    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        """Make parts of videos in analysis searchable, in one commit (``runtime.partials``);
        parts of a stale attempt are dropped silently."""

    @abstractmethod
    async def drop_partial(self, video_id: str) -> None:
        """Remove the partial results of a video that failed."""

    @abstractmethod
    async def write(self, result: VideoResult) -> None:
        """Write a video's results to every sink (batched with other videos); raises
        ``StaleEpoch`` when a newer attempt owns the video."""

    @abstractmethod
    async def forget(self, videos: Sequence[VideoRef]) -> None:
        """Remove everything the sinks hold of ``videos`` (deleted), after the writes made
        before; their bytes are purged from disk within ``storage.deletion_max_s``."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the store holds."""


class LocalResults(ResultStore):
    """The one writer, in this process."""

    def __init__(self, config: ServiceConfig) -> None:
        self._writer = FencedResultWriter(config)

    @property
    def stats(self) -> WriterStats:
        """What the writer has done so far (batches, parts and their lags)."""
        return self._writer.stats

    async def earlier(self, video_id: str) -> EarlierResult | None:
        return await self._writer.earlier(video_id)

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        await self._writer.write_partial(parts)

    async def drop_partial(self, video_id: str) -> None:
        await self._writer.drop_partial(video_id)

    async def write(self, result: VideoResult) -> None:
        await self._writer.write(result)

    async def forget(self, videos: Sequence[VideoRef]) -> None:
        await self._writer.forget(videos)

    async def close(self) -> None:
        await self._writer.close()
