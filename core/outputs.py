"""What a video stage gives: its section of the result document and segments of its own kinds.

A video stage (``stages.base.VideoStage``) runs once per video, on the assembled result. Its
``VideoOutput`` is stored whole in the result document under the stage's name, and its segments
join the video's other segments (the ``segments`` table; the search table for the kinds the
stage declares searchable), like shots, text spans and speech do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.speech import SOUND_KINDS


@dataclass(frozen=True)
class OutputSegment:
    """One stretch of a video a video stage says something about, e.g. a chapter."""

    kind: str
    start_s: float
    end_s: float
    text: str = ""
    attributes: Mapping[str, Any] = field(default_factory=dict)  # JSON-ready
    searchable: bool = False  # set from the stage's declaration when it runs

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "start_s": float(self.start_s),
            "end_s": float(self.end_s),
            "text": self.text,
            "attributes": dict(self.attributes),
            "searchable": self.searchable,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> OutputSegment:
        return cls(
            kind=str(raw["kind"]),
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
            text=str(raw.get("text") or ""),
            attributes=dict(raw.get("attributes") or {}),
            searchable=bool(raw.get("searchable")),
        )


@dataclass(frozen=True)
class VideoOutput:
    """What one video stage found in one video."""

    data: Mapping[str, Any] = field(default_factory=dict)  # JSON-ready, the document's section
    segments: tuple[OutputSegment, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"data": dict(self.data), "segments": [s.to_json() for s in self.segments]}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> VideoOutput:
        segments = tuple(OutputSegment.from_json(s) for s in raw.get("segments") or ())
        return cls(data=dict(raw.get("data") or {}), segments=segments)


def outputs_from_json(raw: Mapping[str, Any] | None) -> dict[str, VideoOutput]:
    """A document's ``outputs`` section (absent from documents written before video stages)."""
    return {name: VideoOutput.from_json(output) for name, output in (raw or {}).items()}


#: The segment kinds the service's own views give (``sinks.views``) and search's ``frame``: a
#: video stage's segments are of kinds of its own.
BUILT_IN_SEGMENT_KINDS = ("shot", "text", "speech", "description", "frame", *SOUND_KINDS)
