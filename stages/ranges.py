"""Ranges of one video, to decode it in several places at once.

A range starts where a resumed attempt would (a ``ResumePoint``: seek to the key frame
before, warm the shot detector up, skip what comes before) and ends before a chunk
(``end_chunk``), so the ranges of a video yield exactly the chunks, samples and sample
indexes that one decoder yields from start to end, and each sample is taken once.

Where each range starts is found without decoding anything: the container's packets carry
every frame's presentation time, and in ``fps`` mode the sampler picks frames by time alone.
Other modes are not split: in ``shots`` mode where a sample falls depends on the pictures,
and ``keyframes`` decodes little anyway. A stream with a packet that has no timestamp is not
split either (the decoder would place that frame by counting).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import av

from core.config import LimitSettings
from core.errors import ReelsenseError
from stages.fetch import main_video_stream, open_container
from stages.sampling import ResumePoint, Sampler


@dataclass(frozen=True)
class VideoRange:
    """Where one decoder starts (None: at the beginning) and the chunk it stops before
    (None: at the video's end)."""

    start: ResumePoint | None
    end_chunk: int | None


@dataclass(frozen=True)
class Timeline:
    """The presentation times of a video stream's frames, in order, and of its key frames."""

    times: list[float]
    key_times: list[float]


def frame_times(path: str, limits: LimitSettings) -> Timeline | None:
    """Every frame's presentation time, and every key frame's, read from the main video
    stream's packets; None when a packet has no timestamp or the packets cannot be read (the
    caller then decodes the video in one piece, which reports the error as decoding does)."""
    try:
        with open_container(path, limits) as container:
            stream = main_video_stream(container)
            if stream is None or stream.time_base is None:
                return None
            start = stream.start_time or 0
            base = stream.time_base
            times: list[float] = []
            keys: list[float] = []
            for packet in container.demux(stream):
                if packet.size == 0:  # the flush packet at the end
                    continue
                if packet.pts is None:
                    return None
                times.append(max(0.0, float((packet.pts - start) * base)))
                if packet.is_keyframe:
                    keys.append(times[-1])
    except (ReelsenseError, av.error.FFmpegError, OSError):
        return None  # decoding reports it, with its reason code
    # Packets come in decoding order; frames leave the decoder in this one.
    return Timeline(sorted(times), sorted(keys))


#: Ranges are cut so that the dearest costs at most this much more than in the best cut with
#: as many ranges as allowed, and with as few ranges as that leaves: a range that shortens the
#: longest by less starts a decoder (and decodes its warm-up) for next to nothing.
_SLACK = 1.05


class _RangeCosts:
    """What decoding a run of whole chunks costs, in frames decoded: from the key frame a
    decoder seeks to for its first sample (``warm_up_s`` before the sample ahead of it, see
    ``DecodeSampleStage``) to the range's last sample, or the video's end for the last range."""

    def __init__(
        self,
        timeline: Timeline,
        samples: list[float],
        chunk_size: int,
        warm_up_s: float,
        start: ResumePoint | None,
    ) -> None:
        self._times = timeline.times
        self._keys = timeline.key_times
        self._samples = samples
        self._size = chunk_size
        self._warm_up_s = warm_up_s
        self.chunks = math.ceil(len(samples) / chunk_size)
        self._first_from = self._seek_to(start.after_s) if start is not None else 0.0

    def _seek_to(self, after_s: float) -> float:
        """Where a decoder resuming after ``after_s`` starts decoding: the key frame before."""
        target = max(0.0, after_s - self._warm_up_s)
        k = bisect.bisect_right(self._keys, target + 1e-9)
        return self._keys[k - 1] if k else 0.0

    def __call__(self, begin: int, end: int) -> int:
        """Frames decoded for chunks ``begin`` to ``end`` (exclusive) of the samples."""
        start_s = self._seek_to(self._samples[begin * self._size - 1]) if begin else None
        first = bisect.bisect_left(self._times, self._first_from if start_s is None else start_s)
        if end >= self.chunks:
            return len(self._times) - first
        last = bisect.bisect_right(self._times, self._samples[end * self._size - 1])
        return last - first

    def cut(self, limit: float) -> list[int]:
        """The fewest ranges of at most ``limit`` each, as the first chunk of each: greedy,
        every range as long as the limit allows (a later start never costs a range more)."""
        begins = [0]
        end = 1
        while end < self.chunks:
            if self(begins[-1], end + 1) > limit:
                begins.append(end)
            end += 1
        return begins

    def cheapest(self, parts: int) -> float:
        """The least that the dearest range costs when cut into at most ``parts`` ranges."""
        # No cut does with less than its dearest chunk alone (a range reaching further back
        # decodes from no later), and at that limit no range the greedy cut makes is dearer.
        low = float(max(self(c, c + 1) for c in range(self.chunks)))
        if len(self.cut(low)) <= parts:
            return low
        high = float(self(0, self.chunks))  # enough for one range
        while high - low > 0.5:  # costs are whole frames
            middle = (low + high) / 2
            if len(self.cut(middle)) <= parts:
                high = middle
            else:
                low = middle
        return high


def plan_ranges(
    timeline: Timeline,
    *,
    fps: float,
    chunk_size: int,
    start: ResumePoint | None,
    parts: int,
    min_s: float,
    warm_up_s: float,
) -> list[VideoRange]:
    """Up to ``parts`` ranges of whole chunks, from ``start`` on, as many as the video holds
    ``min_s`` of samples, cut where the decoders finish together: a range after the first also
    decodes from the key frame ``warm_up_s`` before it. A single range when the video is too
    short, or when another range would not shorten the dearest (one key frame at the start)."""
    whole = [VideoRange(start, None)]
    if parts < 2 or min_s <= 0:
        return whole
    sampler = Sampler(fps, "fps", start)
    samples = [t for t in timeline.times if sampler.takes(t, False)]
    costs = _RangeCosts(timeline, samples, chunk_size, warm_up_s, start)
    if not samples or costs.chunks < 2:
        return whole
    span_s = samples[-1] - samples[0]
    parts = min(parts, costs.chunks, math.floor(span_s / min_s))
    if parts < 2:
        return whole
    begins = costs.cut(costs.cheapest(parts) * _SLACK)
    first_chunk = start.chunk_index if start is not None else 0
    first_sample = start.sample_index if start is not None else 0
    ranges: list[VideoRange] = []
    for k, offset in enumerate(begins):
        end = first_chunk + begins[k + 1] if k + 1 < len(begins) else None
        if k == 0:
            ranges.append(VideoRange(start, end))
            continue
        position = offset * chunk_size  # of the range's first sample among ``samples``
        begin = ResumePoint(
            chunk_index=first_chunk + offset,
            sample_index=first_sample + position,
            after_s=samples[position - 1],
        )
        ranges.append(VideoRange(begin, end))
    return ranges
