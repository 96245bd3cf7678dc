"""Decode + sample: stream a video's sampled frames out in chunks while decoding goes on.

Sampling modes:

- ``fps``: one frame per ``1 / sample_fps`` seconds of presentation time, the first at t=0. A
  frame is taken when its timestamp (from its pts, not from counting frames, so variable frame
  rates and dropped frames are handled) reaches the next sampling slot. Every frame is decoded
  (H.264 needs its references) but only sampled frames are converted to RGB, which is most of
  the per-frame cost.
- ``shots``: ``fps``, plus a sample at the start of every shot (the frame that confirms its
  boundary, see ``stages.shots``), so even a shot shorter than the interval has one.
- ``keyframes``: the decoder skips everything but key frames (``skip_frame = NONKEY``), which
  is much cheaper; every key frame is a sample.

With ``skip_nonref_frames`` the decoder leaves out the frames nothing refers to (most
B-frames, ``skip_frame = NONREF``): samples and shots come from the frames it does decode.

Shot boundaries are found on every decoded frame (unless ``shot_detection`` is off) and given
to the next sample (``Frame.boundaries``). A sample whose picture repeats an earlier sample of
the same chunk and shot gets ``repeat_of`` and no pixels: no stage analyses it, it takes the
findings of the sample it repeats (``Chunk.with_repeats_filled``). Both are decided from what
is decoded alone, so an attempt that resumes a video decides them as the first one did (the
detector is warmed up on the frames between the key frame it seeks to and the resume point).

Limits hold on what is decoded, not only on what the header promised
(``stages.decode_budget``): the presentation time, the frame size of every frame, the number of
frames decoded, the time spent decoding, and timestamps that stop advancing each end the video
with their reason code.

Frames are turned upright (display matrix), downscaled so the long side is at most
``max_side``, and handed out in chunks; the final chunk has ``last=True``. A chunk's size
follows a target cost: as many samples as fit in ``chunk_decode_mpix`` megapixels decoded, at
most ``chunk_frames``. It is decided from the probe alone, so an attempt that resumes a video
cuts its chunks exactly where the first attempt did.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Literal

import av
import numpy as np
from av.container import InputContainer

from core.config import LimitSettings, ServiceConfig, StageSettings
from core.records import Chunk, Frame, Image, LocalVideo, ProbeInfo
from core.stage_names import DECODE
from stages.base import PIXELS, Resources, StageKind, StreamingStage
from stages.decode_budget import DecodeBudget
from stages.errors import DecodeError, LimitExceeded, UnsupportedMedia
from stages.fetch import main_video_stream, open_container
from stages.ranges import VideoRange, frame_times, plan_ranges
from stages.sampling import ChunkCutter, ResumePoint, Sampler, ShotMarks
from stages.shots import ShotSettings

# Bump when the sampling rules change in a way that changes which frames come out.
SAMPLER_REVISION = 2
# A video whose packets stop this much before its declared end is reported as truncated.
_TRUNCATION_SLACK_S = 1.0
_TRUNCATION_SLACK_RATIO = 0.05
_MAX_THREADS = 4
# A demux error this close to the end of the file means the file was cut short.
_TRUNCATION_TAIL_BYTES = 64 * 1024


class DecodedFrames:
    """Video frames this process has decoded, all videos together: what shows that a
    recompute which needs no pixels (a stage added to finished videos) decodes none."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def add(self, count: int) -> None:
        with self._lock:
            self._count += count

    @property
    def count(self) -> int:
        return self._count


FRAMES_DECODED = DecodedFrames()


class DecodeSampleStage(StreamingStage[LocalVideo, Chunk]):
    """LocalVideo -> Chunks of sampled RGB frames, streamed as decoding proceeds."""

    name = DECODE
    kind = StageKind.INGEST
    fills = (PIXELS,)  # and where each sample is, its shot boundaries, its thumbnail
    resources = Resources(cpus=0.5)

    @classmethod
    def build(cls, config: ServiceConfig) -> DecodeSampleStage:
        return cls(config.stages, config.limits)

    def __init__(self, stages: StageSettings, limits: LimitSettings) -> None:
        self._mode = stages.sample_mode
        # What the decoder leaves out (FFmpeg's ``skip_frame``).
        self._skip_frame: Literal["NONKEY", "NONREF"] | None = None
        if self._mode == "keyframes":
            self._skip_frame = "NONKEY"
        elif stages.skip_nonref_frames:
            self._skip_frame = "NONREF"
        self._fps = stages.sample_fps
        self._chunk_frames = stages.chunk_frames
        self._chunk_mpix = stages.chunk_decode_mpix
        self._max_side = stages.max_side
        self._threads = stages.decode_threads or min(_MAX_THREADS, os.cpu_count() or 1)
        self._limits = limits
        self._shots: ShotSettings | None = None
        if stages.shot_detection or self._mode == "shots":
            self._shots = ShotSettings(
                cut_change=stages.shot_cut_change,
                gradual_change=stages.shot_gradual_change,
                min_shot_s=stages.shot_min_s,
            )
        self._repeat_max_change = stages.repeat_max_change
        self._thumbnail_side = stages.thumbnail_side
        # A resumed attempt shows the detector this much video before its resume point (at
        # least one frame before a cut, and the longest transition), so that it finds the
        # boundaries the first attempt found there.
        self._warm_up_s = 0.0
        if self._shots is not None:
            self._warm_up_s = self._shots.max_transition_s + self._shots.lag_s + 1.0

    def chunk_size(self, probe: ProbeInfo) -> int:
        """Sampled frames per chunk for a video: as many as fit in the decoding budget of one
        chunk, between 1 and ``chunk_frames``."""
        if self._chunk_mpix is None or probe.width <= 0 or probe.height <= 0:
            return self._chunk_frames
        decoded_per_sample = 1.0  # key frames: only the samples are decoded
        if self._mode != "keyframes":
            if not (math.isfinite(probe.fps) and probe.fps > 0):  # no cost to go by
                return self._chunk_frames
            decoded_per_sample = max(1.0, probe.fps / self._fps)
        per_sample = probe.width * probe.height * decoded_per_sample / 1e6
        return max(1, min(self._chunk_frames, math.floor(self._chunk_mpix / per_sample)))

    def version_params(self) -> Mapping[str, object]:
        params: dict[str, object] = {
            "sample_mode": self._mode,
            "chunk_frames": self._chunk_frames,
            "max_side": self._max_side,
            "sampler_revision": SAMPLER_REVISION,
        }
        if self._chunk_mpix is not None:
            params["chunk_decode_mpix"] = self._chunk_mpix
        if self._mode != "keyframes":
            params["sample_fps"] = self._fps
        if self._skip_frame == "NONREF":
            params["skip_nonref_frames"] = True
        if self._shots is not None:
            params["shots"] = dataclasses.asdict(self._shots)
        if self._repeat_max_change > 0:
            params["repeat_max_change"] = self._repeat_max_change
        if self._shots is not None and self._thumbnail_side > 0:
            params["thumbnail_side"] = self._thumbnail_side
        return params

    def stream(self, item: LocalVideo) -> Iterator[Chunk]:
        """Yield the chunks of one video as soon as each is full.

        Raises (from the generator, after the chunks already yielded) :class:`DecodeError`
        (``decode_error`` for corrupt data, ``video_truncated`` when the data ends early) and
        :class:`LimitExceeded` (``limit_frames``, and from what is decoded ``limit_duration``,
        ``limit_dimensions``, ``limit_decoded_frames``, ``limit_decode_time``; a stalled clock is
        ``timestamps_stalled``).
        """
        return self.stream_from(item, None)

    def stream_from(
        self, item: LocalVideo, resume: ResumePoint | None, end_chunk: int | None = None
    ) -> Iterator[Chunk]:
        """``stream`` from a resume point: seeks to the key frame before it and yields only
        the chunks from ``resume.chunk_index`` on; with ``end_chunk``, only those before it
        (a range of the video, see ``ranges``)."""
        self._check_estimated_frames(item)
        if resume is not None and resume.finished:
            return
        with open_container(item.path, self._limits) as container:
            yield from self._chunks(item, container, resume, end_chunk)

    def ranges(
        self, item: LocalVideo, start: ResumePoint | None, parts: int, min_s: float
    ) -> list[VideoRange]:
        """The video from ``start`` on in up to ``parts`` ranges of at least ``min_s`` each,
        for as many decoders (one range when it cannot or need not be split)."""
        whole = [VideoRange(start, None)]
        if self._mode != "fps" or parts < 2 or (start is not None and start.finished):
            return whole
        timeline = frame_times(item.path, self._limits)
        if timeline is None:
            return whole
        return plan_ranges(
            timeline,
            fps=self._fps,
            chunk_size=self.chunk_size(item.probe),
            start=start,
            parts=parts,
            min_s=min_s,
            warm_up_s=self._warm_up_s,
        )

    def _check_estimated_frames(self, video: LocalVideo) -> None:
        if self._mode == "keyframes" or video.probe.duration_s <= 0:
            return
        expected = math.floor(video.probe.duration_s * self._fps) + 1
        if expected > self._limits.max_frames + 1:
            raise LimitExceeded(
                f"{video.probe.duration_s:.1f} s at {self._fps} fps is about {expected} frames, "
                f"above the {self._limits.max_frames} frame limit",
                code="limit_frames",
            )

    def _chunks(
        self,
        video: LocalVideo,
        container: InputContainer,
        resume: ResumePoint | None,
        end_chunk: int | None,
    ) -> Iterator[Chunk]:
        stream = main_video_stream(container)
        if stream is None:
            raise UnsupportedMedia("the file has no video stream", code="no_video_stream")
        stream.thread_type = "AUTO"
        # FFmpeg would start one thread per core of the node; a replica gets a few at most.
        stream.codec_context.thread_count = self._threads
        if self._skip_frame is not None:
            stream.codec_context.skip_frame = self._skip_frame
        size = self.chunk_size(video.probe)
        sampler = Sampler(self._fps, self._mode, resume)
        marks = ShotMarks(self._shots, self._repeat_max_change, self._thumbnail_side)
        reader = _FrameReader(container, stream, os.path.getsize(video.path))
        if resume is not None:
            reader.seek(max(0.0, resume.after_s - self._warm_up_s))
        chunk = ChunkCutter(video.ref.video_id, size, resume)
        budget = DecodeBudget(self._limits)
        for frame, t in reader:
            budget.spend(frame, t)
            boundary = marks.see(frame, t, warming=t <= sampler.skip_until)
            if not sampler.takes(t, boundary):
                continue
            if chunk.sampled >= self._limits.max_frames:
                raise LimitExceeded(
                    f"more than {self._limits.max_frames} sampled frames", code="limit_frames"
                )
            full = chunk.full()
            if full is not None:  # a full chunk waits for the next sample, to know it is not last
                with budget.waiting():
                    yield full
                marks.new_chunk()
            sample = Frame(chunk.sampled, t, None, keyframe=bool(frame.key_frame))
            chunk.add(marks.mark(sample, functools.partial(self._to_rgb, frame)))
            if end_chunk is not None and chunk.index == end_chunk - 1:
                ended = chunk.full()
                if ended is not None:  # the range's last chunk: the next range goes on
                    with budget.waiting():
                        yield ended
                    return
        reader.check_complete(self._declared_end_s(container, stream, video))
        yield chunk.last()

    def _to_rgb(self, frame: av.VideoFrame) -> Image:
        width, height = frame.width, frame.height
        scale = min(1.0, self._max_side / max(width, height))
        if scale < 1.0:
            width = max(2, round(width * scale / 2) * 2)
            height = max(2, round(height * scale / 2) * 2)
        rgb = frame.reformat(width=width, height=height, format="rgb24", interpolation="AREA")
        image: Image = np.asarray(rgb.to_ndarray(), dtype=np.uint8)
        turns = round(frame.rotation / 90) % 4
        if turns:
            # The display matrix rotates counterclockwise by ``rotation`` degrees.
            image = np.ascontiguousarray(np.rot90(image, k=turns))
        return image

    @staticmethod
    def _declared_end_s(
        container: InputContainer, stream: av.VideoStream, video: LocalVideo
    ) -> float | None:
        if stream.duration is not None and stream.time_base is not None and stream.duration > 0:
            return float(stream.duration * stream.time_base)
        # Without a per-stream duration only a lone video stream's container duration is its own.
        if len(container.streams) == 1 and video.probe.duration_s > 0:
            return video.probe.duration_s
        return None


class _FrameReader:
    """Decoded frames with their presentation time in seconds from the stream's start.

    Maps FFmpeg errors to :class:`DecodeError` and remembers how far the packets went, to
    tell a complete video from a truncated one.
    """

    def __init__(self, container: InputContainer, stream: av.VideoStream, size_bytes: int) -> None:
        self._container = container
        self._size_bytes = size_bytes
        self._byte_end = 0  # the furthest byte of the file the demuxer has read a packet up to
        self._stream = stream
        self._time_base: Fraction = stream.time_base or Fraction(1, 90_000)
        self._start = stream.start_time or 0
        rate = stream.average_rate or stream.guessed_rate
        self._frame_s = float(1 / rate) if rate else 0.04
        self._packet_end = 0.0
        self._last_t = -self._frame_s

    def __iter__(self) -> Iterator[tuple[av.VideoFrame, float]]:
        try:
            for packet in self._container.demux(self._stream):
                if packet.pts is not None:
                    end = packet.pts + (packet.duration or 0) - self._start
                    self._packet_end = max(self._packet_end, float(end * self._time_base))
                if packet.pos is not None and packet.pos >= 0:
                    self._byte_end = max(self._byte_end, packet.pos + packet.size)
                for frame in packet.decode():
                    FRAMES_DECODED.add(1)
                    yield frame, self._time_of(frame)
        except av.error.FFmpegError as exc:
            tail = min(_TRUNCATION_TAIL_BYTES, self._size_bytes // 20)
            if self._byte_end >= self._size_bytes - tail:
                # It failed where the file ends: the index promised data the file lacks.
                raise DecodeError(
                    f"the data ends at byte {self._size_bytes} mid-stream: the file is "
                    f"truncated ({exc})",
                    code="video_truncated",
                ) from exc
            raise DecodeError(f"decoding failed: {exc}", code="decode_error") from exc

    def seek(self, t: float) -> None:
        """Continue from the key frame at or before ``t`` seconds."""
        target = int(t / self._time_base) + self._start
        try:
            self._container.seek(target, backward=True, any_frame=False, stream=self._stream)
        except av.error.FFmpegError as exc:
            raise DecodeError(f"seeking to {t:.2f} s failed: {exc}", code="decode_error") from exc
        self._last_t = t - self._frame_s

    def _time_of(self, frame: av.VideoFrame) -> float:
        if frame.pts is None:  # no timestamp: one frame duration after the previous one
            t = self._last_t + self._frame_s
        else:
            t = max(0.0, float((frame.pts - self._start) * self._time_base))
        self._last_t = t
        return t

    def check_complete(self, declared_end_s: float | None) -> None:
        if declared_end_s is None:
            return
        slack = max(_TRUNCATION_SLACK_S, _TRUNCATION_SLACK_RATIO * declared_end_s)
        if self._packet_end + slack < declared_end_s:
            raise DecodeError(
                f"the data ends at {self._packet_end:.2f} s of {declared_end_s:.2f} s: "
                "the file is truncated",
                code="video_truncated",
            )
