"""A video's shots, from the boundaries the decoder gave its samples (``Frame.boundaries``).

Shot ``i`` runs from its boundary (0 for the first) to the next one (the video's end for the
last). A gradual transition belongs to no shot alone: the boundary is its middle, and
``transition_s`` says from when to when the pictures blend. A shot's keyframe is the first
sample taken in it after its transition that has a thumbnail, else the first (``shots``
sampling takes one in every shot; sampling by rate alone may take none in a shot shorter than
its interval). By rate alone, the sample on a cut is taken before the cut is confirmed a frame
later, and the next sample, which carries the boundary, is the one with the thumbnail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.records import Frame, ShotBoundary


@dataclass(frozen=True)
class ShotSegment:
    index: int
    start_s: float
    end_s: float
    entered_by: str  # "start", "cut" or "gradual"
    transition_s: tuple[float, float] | None  # where the gradual transition into it blends
    keyframe: int | None  # the index of the sample that shows it
    keyframe_s: float | None
    samples: int  # how many samples were taken in it

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start_s": round(self.start_s, 4),
            "end_s": round(self.end_s, 4),
            "entered_by": self.entered_by,
            "transition_s": None if self.transition_s is None else list(self.transition_s),
            "keyframe": self.keyframe,
            "keyframe_s": self.keyframe_s,
            "samples": self.samples,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ShotSegment:
        transition = raw.get("transition_s")
        return cls(
            index=int(raw["index"]),
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
            entered_by=str(raw["entered_by"]),
            transition_s=None if transition is None else (transition[0], transition[1]),
            keyframe=raw.get("keyframe"),
            keyframe_s=raw.get("keyframe_s"),
            samples=int(raw["samples"]),
        )


def video_shots(frames: Sequence[Frame], duration_s: float) -> list[ShotSegment]:
    """The shots of a video whose samples are ``frames`` (any order) and which lasts
    ``duration_s`` (0 when unknown: then it ends at its last sample)."""
    ordered = sorted(frames, key=lambda f: (f.timestamp_s, f.index))
    boundaries = sorted(
        (b for frame in ordered for b in frame.boundaries), key=lambda b: b.timestamp_s
    )
    last_sample = ordered[-1].timestamp_s if ordered else 0.0
    end = max(duration_s, last_sample)
    starts: list[ShotBoundary | None] = [None, *boundaries]
    stops = [b.timestamp_s for b in boundaries] + [end]
    shots: list[ShotSegment] = []
    for i, (boundary, stop) in enumerate(zip(starts, stops, strict=True)):
        start = 0.0 if boundary is None else boundary.timestamp_s
        final = i == len(boundaries)
        inside = [
            f
            for f in ordered
            if start <= f.timestamp_s < stop or (final and f.timestamp_s >= start)
        ]
        settled = 0.0 if boundary is None else boundary.end_s
        after = [f for f in inside if f.timestamp_s >= settled] or inside[:1]
        shown = next((f for f in after if f.thumbnail is not None), after[0] if after else None)
        gradual = boundary is not None and boundary.kind == "gradual"
        shots.append(
            ShotSegment(
                index=i,
                start_s=start,
                end_s=max(start, stop),
                entered_by="start" if boundary is None else boundary.kind,
                transition_s=(boundary.start_s, boundary.end_s) if boundary and gradual else None,
                keyframe=None if shown is None else shown.index,
                keyframe_s=None if shown is None else shown.timestamp_s,
                samples=len(inside),
            )
        )
    return shots
