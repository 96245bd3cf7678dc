"""How the decoder turns decoded frames into samples and chunks: which frames are sampled
(``Sampler``), what each sample carries about shots and repeats (``ShotMarks``), and where
chunks are cut (``ChunkCutter``). All three decide from what is decoded alone, so an attempt
that resumes a video decides as the first attempt did."""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import av
from PIL import Image as PILImage

from core.records import Chunk, Frame, Image, ShotBoundary
from stages.shots import ShotDetector, ShotSettings, Signature, repeats, signature

_THUMBNAIL_QUALITY = 80
# Slack against rounding of timestamps to the stream's time base.
EPSILON_S = 1e-3


@dataclass(frozen=True)
class ResumePoint:
    """Where an interrupted video picks up: the chunk after the last one whose outputs were
    persisted, known by that chunk's last frame. Sampling continues exactly as the first
    attempt would have (same frame indexes, same slots), so resumed chunks match."""

    chunk_index: int  # the first chunk to produce
    sample_index: int  # the index of its first frame
    after_s: float  # the timestamp of the frame before it; earlier frames are skipped
    finished: bool = False  # every chunk is persisted: nothing left to decode


# Where an ingest stream that only fetches the file (for its speech) "resumes" decoding.
NOTHING_TO_DECODE = ResumePoint(0, 0, 0.0, finished=True)


class Sampler:
    """Which decoded frames become samples: the rate's slots, and in ``shots`` mode every
    frame that confirms a shot boundary. Resumed, it skips what the first attempt sampled and
    keeps the first attempt's slots."""

    def __init__(self, fps: float, mode: str, resume: ResumePoint | None) -> None:
        self._interval = 1.0 / fps
        self._mode = mode
        self._next_slot = 0.0
        self.skip_until = -1.0
        if resume is not None:
            self.skip_until = resume.after_s + EPSILON_S
            self._next_slot = self._slot_after(resume.after_s)

    def _slot_after(self, t: float) -> float:
        return (math.floor((t + EPSILON_S) / self._interval) + 1) * self._interval

    def takes(self, t: float, boundary: bool) -> bool:
        if t <= self.skip_until:
            return False
        if self._mode == "keyframes":
            return True
        if t + EPSILON_S < self._next_slot and not (boundary and self._mode == "shots"):
            return False
        self._next_slot = max(self._next_slot, self._slot_after(t))
        return True


class ShotMarks:
    """Shot boundaries and repeated samples, from each decoded frame's signature."""

    def __init__(
        self, shots: ShotSettings | None, repeat_max_change: float, thumbnail_side: int = 0
    ) -> None:
        self._detector = ShotDetector(shots) if shots is not None else None
        self._thumbnail_side = thumbnail_side
        self._repeat_max_change = repeat_max_change
        self._boundaries: list[ShotBoundary] = []  # since the previous sample
        self._frame: av.VideoFrame | None = None  # the frame just seen
        self._signature: Signature | None = None  # its signature, once computed
        # The samples of this chunk and shot that a repeat may point at: (index, signature).
        self._originals: list[tuple[int, Signature]] = []

    def see(self, frame: av.VideoFrame, t: float, *, warming: bool) -> bool:
        """Feed one decoded frame; whether it confirms a boundary. While ``warming`` (frames
        a resumed attempt decodes before its resume point) nothing is recorded."""
        self._frame, self._signature = frame, None
        if self._detector is None:  # repeats alone need the signatures of samples only
            return False
        self._signature = signature(frame)
        boundary = self._detector.feed(t, self._signature)
        if boundary is None or warming:
            return False
        self._boundaries.append(boundary)
        self._originals.clear()
        return True

    def new_chunk(self) -> None:
        self._originals.clear()

    def mark(self, sample: Frame, pixels: Callable[[], Image]) -> Frame:
        """The sample with the boundaries since the previous one, and its pixels unless it
        repeats an earlier sample of its chunk and shot. The first sample of a shot (the
        video's first, or one that carries boundaries) also gets a JPEG thumbnail: it is the
        shot's keyframe (``core.shots``)."""
        sample.boundaries, self._boundaries = tuple(self._boundaries), []
        if self._repeat_max_change > 0:
            sig = self._signature
            if sig is None:
                assert self._frame is not None, "see() comes before mark()"
                sig = self._signature = signature(self._frame)
            for index, original in self._originals:
                if repeats(original, sig, self._repeat_max_change):
                    sample.repeat_of = index
                    return sample
            self._originals.append((sample.index, sig))
        sample.image = pixels()
        starts_shot = sample.index == 0 or bool(sample.boundaries)
        if starts_shot and self._detector is not None and self._thumbnail_side > 0:
            sample.thumbnail = thumbnail(sample.image, self._thumbnail_side)
        return sample


class ChunkCutter:
    """Samples into chunks of a fixed size, numbered as the first attempt numbered them."""

    def __init__(self, video_id: str, size: int, resume: ResumePoint | None) -> None:
        self._video_id = video_id
        self._size = size
        self.index = resume.chunk_index if resume is not None else 0
        self.sampled = resume.sample_index if resume is not None else 0
        self._pending: list[Frame] = []

    def full(self) -> Chunk | None:
        """The pending chunk if it is full (then a new one begins)."""
        if len(self._pending) < self._size:
            return None
        chunk = Chunk(self._video_id, self.index, self._pending, last=False)
        self.index += 1
        self._pending = []
        return chunk

    def add(self, sample: Frame) -> None:
        self._pending.append(sample)
        self.sampled += 1

    def last(self) -> Chunk:
        return Chunk(self._video_id, self.index, self._pending, last=True)


def thumbnail(image: Image, side: int) -> bytes:
    """A JPEG of the image, its long side at most ``side`` pixels (same bytes for the same
    pixels: no timestamps or encoder choices that vary)."""
    picture = PILImage.fromarray(image)
    picture.thumbnail((side, side), PILImage.Resampling.BILINEAR)
    out = io.BytesIO()
    picture.save(out, format="JPEG", quality=_THUMBNAIL_QUALITY)
    return out.getvalue()
