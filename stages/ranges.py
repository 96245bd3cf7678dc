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


def frame_times(path: str, limits: LimitSettings) -> list[float] | None:
    """The presentation time of every frame of the main video stream, in order, read from its
    packets; None when a packet has no timestamp or the packets cannot be read (the caller
    then decodes the video in one piece, which reports the error as decoding does)."""
    try:
        with open_container(path, limits) as container:
            stream = main_video_stream(container)
            if stream is None or stream.time_base is None:
                return None
            start = stream.start_time or 0
            base = stream.time_base
            times: list[float] = []
            for packet in container.demux(stream):
                if packet.size == 0:  # the flush packet at the end
                    continue
                if packet.pts is None:
                    return None
                times.append(max(0.0, float((packet.pts - start) * base)))
    except (ReelsenseError, av.error.FFmpegError, OSError):
        return None  # decoding reports it, with its reason code
    times.sort()  # packets come in decoding order; frames leave the decoder in this one
    return times


def plan_ranges(
    times: list[float],
    *,
    fps: float,
    chunk_size: int,
    start: ResumePoint | None,
    parts: int,
    min_s: float,
) -> list[VideoRange]:
    """Up to ``parts`` ranges of whole chunks, each covering at least ``min_s`` of video,
    from ``start`` on; a single range when the video is too short to split."""
    whole = [VideoRange(start, None)]
    if parts < 2 or min_s <= 0:
        return whole
    sampler = Sampler(fps, "fps", start)
    samples = [t for t in times if sampler.takes(t, False)]
    chunks = math.ceil(len(samples) / chunk_size)
    if not samples or chunks < 2:
        return whole
    span_s = samples[-1] - samples[0]
    parts = min(parts, chunks, math.floor(span_s / min_s))
    if parts < 2:
        return whole
    first_chunk = start.chunk_index if start is not None else 0
    first_sample = start.sample_index if start is not None else 0
    offsets = [round(k * chunks / parts) for k in range(parts)]
    ranges: list[VideoRange] = []
    for k, offset in enumerate(offsets):
        end = first_chunk + offsets[k + 1] if k + 1 < parts else None
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
