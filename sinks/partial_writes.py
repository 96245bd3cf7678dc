"""Parts of videos still in analysis, written ahead of their final result (``sinks.writer``).

A part is written at once to the sinks that take parts (the search index), so a video is
searchable while it is analysed. A part that comes after its video's final write, from that
attempt or an older one, is not written: it would mark final rows partial.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from core.records import VideoResult


@runtime_checkable
class PartialSink(Protocol):
    """A sink that also takes parts of videos still in analysis (the search index)."""

    name: ClassVar[str]

    def write_partial(self, results: Sequence[VideoResult]) -> None: ...

    def drop_partial(self, video_ids: Sequence[str]) -> None: ...


@dataclass
class Part:
    video_id: str
    result: VideoResult | None  # None: remove the video's partial rows


class FinalWrites:
    """The owner epoch of each video's latest final write, for the last ``kept`` videos."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._finals: OrderedDict[str, int | None] = OrderedDict()

    def superseded(self, part: Part) -> bool:
        """Whether the part's video had its final write by the part's attempt or a later one."""
        if part.result is None or part.video_id not in self._finals:
            return False
        final, epoch = self._finals[part.video_id], part.result.epoch
        return final is None or epoch is None or epoch <= final

    def finished(self, results: Sequence[VideoResult]) -> None:
        for result in results:
            self._finals[result.ref.video_id] = result.epoch
            self._finals.move_to_end(result.ref.video_id)
        while len(self._finals) > self._kept:
            self._finals.popitem(last=False)
