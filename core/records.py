"""Records that cross layers: what flows between stages, the runtime, sinks, the checkpoint
store and the API."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from core.outputs import VideoOutput
from core.speech import Speech

Image = npt.NDArray[np.uint8]  # H x W x 3, RGB
Vector = npt.NDArray[np.float32]


# The consumer lanes a video can come by (consumers/lanes.py): fresh uploads first, bulk work
# (backfills, reprocessing) in the room they leave.
Lane = Literal["fresh", "bulk"]
FRESH_LANE: Lane = "fresh"
BULK_LANE: Lane = "bulk"


def as_lane(value: str | None) -> Lane:
    """The lane a stored or received lane name stands for: bulk only when it says so. A
    missing or unknown name (an event or record older than the lanes) counts as fresh, so
    nothing is ever held back for want of a lane."""
    return BULK_LANE if value == BULK_LANE else FRESH_LANE


@dataclass(frozen=True)
class VideoRef:
    """What an upload event asks for: one video to understand."""

    video_id: str
    uri: str
    tenant: str = "default"
    callback_url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    lane: str = FRESH_LANE  # the consumer's lane it came by; ``as_lane`` reads it
    # When its event was sent (the Kafka record's timestamp, ms since the epoch): a video
    # deleted after that is not brought back by the event. None: not known.
    sent_ms: int | None = None


@dataclass(frozen=True)
class ProbeInfo:
    """What the container says about the video before any frame is decoded."""

    container: str
    codec: str
    width: int
    height: int
    fps: float
    duration_s: float
    video_streams: int
    audio_streams: int
    size_bytes: int


@dataclass(frozen=True)
class LocalVideo:
    """A fetched and probed video, readable at ``path`` on the worker that fetched it."""

    ref: VideoRef
    path: str
    probe: ProbeInfo
    temporary: bool = False  # True when ``path`` is a download that should be removed after use


@dataclass(frozen=True)
class OcrLine:
    text: str
    score: float
    box: tuple[tuple[float, float], ...]  # polygon corners, pixel coordinates

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "score": float(self.score),
            "box": [[float(x), float(y)] for x, y in self.box],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> OcrLine:
        box = tuple((float(x), float(y)) for x, y in raw["box"])
        return cls(text=str(raw["text"]), score=float(raw["score"]), box=box)


@dataclass(frozen=True)
class ShotBoundary:
    """Where one shot ends and the next begins: a hard cut at the first frame of the new shot,
    or a gradual transition (dissolve, fade) from ``start_s`` to ``end_s`` whose middle is
    ``timestamp_s``. ``change`` is how different the frames on either side are (mean absolute
    difference of downscaled Y, U and V planes, 0-255)."""

    timestamp_s: float
    kind: str  # "cut" or "gradual"
    change: float
    start_s: float
    end_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp_s": float(self.timestamp_s),
            "kind": self.kind,
            "change": float(self.change),
            "start_s": float(self.start_s),
            "end_s": float(self.end_s),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ShotBoundary:
        return cls(
            timestamp_s=float(raw["timestamp_s"]),
            kind=str(raw["kind"]),
            change=float(raw["change"]),
            start_s=float(raw["start_s"]),
            end_s=float(raw["end_s"]),
        )


#: The ``Frame`` fields its ``text`` is made of: what the text embedder reads.
TEXT_FIELDS = ("ocr_lines", "caption")


@dataclass
class Frame:
    """One sampled frame and what the stages found in it.

    The decoder also records the shot boundaries it saw since the previous sample
    (``boundaries``: they travel with the frame through chunks, checkpoints and results), and,
    for a sample that looks like an earlier one of its chunk and shot, that sample's index
    (``repeat_of``): such a sample is not analysed, it takes the findings of the one it repeats.
    The first sample of each shot carries a small JPEG of itself (``thumbnail``) until the
    result's sinks store it.
    """

    index: int  # position among the sampled frames of the video, 0-based
    timestamp_s: float
    image: Image | None
    keyframe: bool = False
    ocr_lines: list[OcrLine] = field(default_factory=list)
    caption: str = ""
    # What the VLM answered in the schema of ``core.description`` (a JSON object), if asked.
    description: dict[str, Any] | None = None
    embedding: Vector | None = None
    # From the pixels by an image-text model (CLIP or SigLIP), if one is configured.
    image_embedding: Vector | None = None
    boundaries: tuple[ShotBoundary, ...] = ()
    repeat_of: int | None = None
    # JPEG, for the first sample of each shot; b"" once stored elsewhere (read back from JSON)
    thumbnail: bytes | None = None
    # What stages from other packages found (``Stage.fills`` names no field above), JSON-ready.
    extras: dict[str, Any] = field(default_factory=dict)

    def output(self, name: str) -> Any:
        """The value of one output a stage fills: a field, or one of ``extras``."""
        return getattr(self, name) if name in FRAME_FIELDS else self.extras.get(name)

    def with_outputs(self, values: Mapping[str, Any]) -> Frame:
        """A copy with ``values`` (output name -> value) in the fields or ``extras`` they
        belong to."""
        own = {name: value for name, value in values.items() if name in FRAME_FIELDS}
        extra = {name: value for name, value in values.items() if name not in FRAME_FIELDS}
        if extra:
            own["extras"] = {**self.extras, **extra}
        return replace(self, **own)

    @property
    def ocr_text(self) -> str:
        return " ".join(line.text for line in self.ocr_lines)

    @property
    def text(self) -> str:
        """All text known about the frame: what is written in it, then what it shows."""
        return " ".join(part for part in (self.ocr_text, self.caption) if part)

    def to_json(self) -> dict[str, Any]:
        """Where the frame is and what the stages found in it, JSON-ready: no pixels and no
        embeddings (each store writes those its own way, if at all)."""
        return {
            "index": self.index,
            "timestamp_s": float(self.timestamp_s),
            "keyframe": bool(self.keyframe),
            "ocr_lines": [line.to_json() for line in self.ocr_lines],
            "caption": self.caption,
            "description": self.description,
            "boundaries": [boundary.to_json() for boundary in self.boundaries],
            "repeat_of": self.repeat_of,
            "thumbnail": self.thumbnail is not None,
            **({"extras": self.extras} if self.extras else {}),
        }

    @classmethod
    def from_json(
        cls,
        raw: Mapping[str, Any],
        embedding: Vector | None = None,
        image_embedding: Vector | None = None,
    ) -> Frame:
        repeat_of = raw.get("repeat_of")
        return cls(
            index=int(raw["index"]),
            timestamp_s=float(raw["timestamp_s"]),
            image=None,
            keyframe=bool(raw["keyframe"]),
            ocr_lines=[OcrLine.from_json(line) for line in raw["ocr_lines"]],
            caption=str(raw["caption"]),
            description=raw.get("description"),
            embedding=embedding,
            image_embedding=image_embedding,
            boundaries=tuple(ShotBoundary.from_json(b) for b in raw.get("boundaries") or ()),
            repeat_of=None if repeat_of is None else int(repeat_of),
            # Read back, a thumbnail is known to exist (in the object store), not its bytes.
            thumbnail=b"" if raw.get("thumbnail") else None,
            extras=dict(raw.get("extras") or {}),
        )


#: The outputs a stage may fill as a ``Frame`` field; any other name goes to ``Frame.extras``.
FRAME_FIELDS = frozenset(f.name for f in fields(Frame)) - {"extras"}


@dataclass
class Chunk:
    """A batch of consecutive sampled frames of one video: the unit of streaming and checkpoints."""

    video_id: str
    index: int
    frames: list[Frame]
    last: bool = False  # True on the final chunk of the video

    def without_images(self) -> Chunk:
        """A copy small enough to persist: stage outputs kept, pixels dropped."""
        return replace(self, frames=[replace(f, image=None) for f in self.frames])

    def with_repeats_filled(self, fields: tuple[str, ...]) -> Chunk:
        """The chunk with each repeated sample given the ``fields`` of the sample it repeats
        (always an earlier one of the same chunk)."""
        if all(frame.repeat_of is None for frame in self.frames):
            return self
        found = {frame.index: frame for frame in self.frames}
        frames = [
            frame
            if frame.repeat_of is None
            else frame.with_outputs({f: found[frame.repeat_of].output(f) for f in fields})
            for frame in self.frames
        ]
        return replace(self, frames=frames)


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
    speech: Speech | None = None  # None when speech recognition is off
    outputs: Mapping[str, VideoOutput] = field(default_factory=dict)  # video stage -> output

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

    ``frames`` carry the image stages' outputs (no pixels; embeddings where the sinks hold
    them for the same version); they, ``probe`` and ``stage_versions`` are empty when only
    the summary row was found.
    """

    pipeline_version: str
    frame_count: int
    uri: str = ""
    tenant: str = ""  # "" when not known
    probe: ProbeInfo | None = None
    stage_versions: Mapping[str, str] = field(default_factory=dict)
    frames: list[Frame] = field(default_factory=list)
    speech: Speech | None = None
    outputs: Mapping[str, VideoOutput] = field(default_factory=dict)  # video stage -> output
