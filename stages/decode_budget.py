"""The limits one video's decoding is held to (``stages.decode``), checked on every frame
decoded rather than only on what the header promised."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator

import av

from core.config import LimitSettings
from stages.errors import DecodeError, LimitExceeded
from stages.fetch import check_dimensions

# Decoded frames in a row whose timestamps do not pass the latest one seen: a stream whose
# clock stalls or jumps back for this long would otherwise be decoded with nothing sampled.
_MAX_STALLED_FRAMES = 1000


class DecodeBudget:
    """What one video may cost as it is decoded, whatever its header said (a Matroska file
    without a Duration element probes as 0 s; a stream may change its frame size midway)."""

    def __init__(self, limits: LimitSettings) -> None:
        self._limits = limits
        self._max_frames = limits.max_decoded_frames or math.ceil(
            limits.max_duration_s * limits.max_fps
        )
        self._decoded = 0
        self._first = math.nan  # the presentation time of the first frame decoded
        self._latest = -math.inf
        self._stalled = 0
        self._busy_s = 0.0  # decoding time, up to ``_since``
        self._since = time.monotonic()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """While a chunk handed on is taken downstream: that time is not decoding time."""
        self._busy_s += time.monotonic() - self._since
        try:
            yield
        finally:
            self._since = time.monotonic()

    def _check_time(self) -> None:
        limits = self._limits
        covered = max(0.0, self._latest - self._first) if self._decoded > 1 else 0.0
        allowed = min(
            limits.max_decode_s, limits.decode_grace_s + limits.decode_s_per_video_s * covered
        )
        busy = self._busy_s + time.monotonic() - self._since
        if busy > allowed:
            raise LimitExceeded(
                f"decoding took {busy:.1f} s for {covered:.1f} s of video (limits: "
                f"{limits.decode_grace_s} s + {limits.decode_s_per_video_s} s a second of "
                f"video, {limits.max_decode_s} s at most)",
                code="limit_decode_time",
            )

    def spend(self, frame: av.VideoFrame, t: float) -> None:
        """Count one decoded frame at ``t`` seconds; raise when a limit is passed."""
        limits = self._limits
        self._decoded += 1
        if t > limits.max_duration_s:
            raise LimitExceeded(
                f"frames at {t:.1f} s, above the {limits.max_duration_s} s limit",
                code="limit_duration",
            )
        check_dimensions(frame.width, frame.height, limits)
        if self._decoded > self._max_frames:
            raise LimitExceeded(
                f"more than {self._max_frames} frames decoded", code="limit_decoded_frames"
            )
        if self._decoded == 1:
            self._first = t
        self._check_time()
        if t > self._latest:
            self._latest, self._stalled = t, 0
            return
        self._stalled += 1
        if self._stalled >= _MAX_STALLED_FRAMES:
            raise DecodeError(
                f"{self._stalled} frames in a row at or before {self._latest:.2f} s: "
                "the timestamps stopped advancing",
                code="timestamps_stalled",
            )
