"""The Sink interface and what sinks receive.

Every sink is idempotent: writing the same ``VideoResult`` twice leaves the same state as
writing it once (Lance rows keyed by (video_id, frame), object keys derived from the video).
A sink receives many videos at once so that one commit serves them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from core.records import Frame, ProbeInfo, VideoRef


@dataclass(frozen=True)
class VideoResult:
    """Everything the pipeline found in one video; frames carry no pixels."""

    ref: VideoRef
    pipeline_version: str
    probe: ProbeInfo
    frames: list[Frame]
    completed_at: datetime
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    epoch: int | None = None  # the owner epoch of the attempt that made it (fencing)
    stage_versions: Mapping[str, str] = field(default_factory=dict)  # see ``Lineage``

    @property
    def text(self) -> str:
        """The video's distinct text lines in order of first appearance."""
        seen: dict[str, None] = {}
        for frame in self.frames:
            for line in frame.ocr_lines:
                seen.setdefault(line.text, None)
        return "\n".join(seen)


@dataclass(frozen=True)
class EarlierResult:
    """What the sinks hold of a video's latest result: enough to skip it or reuse stages of it.

    ``frames`` carry the image stages' outputs (no pixels, no embeddings); they, ``probe`` and
    ``stage_versions`` are empty when only the summary row was found.
    """

    pipeline_version: str
    frame_count: int
    uri: str = ""
    probe: ProbeInfo | None = None
    stage_versions: Mapping[str, str] = field(default_factory=dict)
    frames: list[Frame] = field(default_factory=list)


@dataclass(frozen=True)
class SearchHit:
    video_id: str
    tenant: str
    frame_index: int
    timestamp_s: float
    text: str
    score: float  # distance; smaller is nearer


class Sink(ABC):
    """A destination of results."""

    name: ClassVar[str]

    def open(self) -> None:  # noqa: B027 - optional hook
        """Create tables, buckets or folders if missing."""

    @abstractmethod
    def write(self, results: Sequence[VideoResult]) -> None:
        """Write results of several videos; idempotent per video and pipeline version."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""


class VectorIndex(ABC):
    """Nearest-neighbour search over frame text embeddings."""

    @abstractmethod
    def search(
        self, vector: Sequence[float], *, k: int = 10, tenant: str | None = None
    ) -> list[SearchHit]: ...
