"""Audio track -> 16 kHz mono float32 windows, for speech recognition.

``audio_windows`` decodes a video's main audio track with PyAV, converts it with
``av.AudioResampler`` to what Whisper-family models take (16 kHz, mono, float32) and yields it
in windows of up to ``window_s`` seconds, each with its start time on the video's timeline (seconds
from the start of the main video stream, the zero that frame timestamps use in
``stages.decode``). Only one window and the packets being decoded are held at a time, so memory
stays flat however long the track is.

A full window ends between words, not through one (a word cut in two is lost to both
windows): given ``speech`` (a voice-activity detector's spans of speech), in the middle of the
last pause in its second half; else, or where it finds none, at the quietest moment of its
last two seconds.

A window's samples are contiguous in time. Where the track's timestamps jump (a gap in a
live recording, a splice that restarts the clock) the window ends early and the next one
starts at the new time, instead of filling the gap with silence or letting later speech drift.
Samples before the video's zero (audio that starts before the picture) are dropped.

A file without an audio track yields nothing. Data the decoder cannot read raises
:class:`AudioError`, after the windows already yielded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
from av.container import InputContainer

from core.config import LimitSettings
from core.errors import PermanentError
from stages.errors import LimitExceeded
from stages.fetch import main_video_stream, open_container

SAMPLE_RATE = 16_000
# Bump when the windowing rules change in a way that changes which samples a window holds
# (3: cut at a pause that ``speech`` finds).
AUDIO_REVISION = 3
# MPEG-TS timestamps are 33-bit counts of 1/90000 s: they wrap every 26.5 hours, and a muxer
# that shifts a stream a little before zero writes it as just below the wrap.
_WRAP_S = {"mpegts": 2**33 / 90_000}
# Timestamps may wobble by a frame's rounding; a jump larger than this is a real gap.
_GAP_S = 0.1
# A full window ends at the quietest 20 ms of its last 2 s (a third of it at most).
_CUT_SEARCH_S = 2.0
_CUT_STEP_S = 0.02
_QUIETER = 0.1  # a step this much quieter than the window's end (10 dB) is a better cut
_PAUSE = round(0.15 * SAMPLE_RATE)  # the shortest silence between spans of speech cut at

AudioSamples = npt.NDArray[np.float32]  # mono, SAMPLE_RATE, -1..1
# Where speech is heard in some samples: [start, end) spans of sample indices, in order.
SpeechFinder = Callable[[AudioSamples], Sequence[tuple[int, int]]]


class AudioError(PermanentError):
    """The audio track cannot be decoded: ``audio_decode_error`` for data the demuxer or the
    decoder rejects, ``audio_unsupported`` for a codec this FFmpeg build cannot decode."""

    code = "audio_error"


@dataclass(frozen=True)
class AudioWindow:
    """``samples`` (16 kHz mono float32) that start ``start_s`` seconds into the video."""

    start_s: float
    samples: AudioSamples

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


def main_audio_stream(container: InputContainer) -> av.AudioStream | None:
    """The audio track a player would pick (FFmpeg's best audio stream), or None."""
    stream = container.streams.best("audio")
    return stream if isinstance(stream, av.AudioStream) else None


def audio_windows(
    path: str | Path,
    *,
    window_s: float = 30.0,
    limits: LimitSettings | None = None,
    speech: SpeechFinder | None = None,
) -> Iterator[AudioWindow]:
    """Yield the main audio track of the file at ``path`` in windows of up to ``window_s``
    seconds, in the order of the track; each full one ends at a pause ``speech`` finds.

    The file is opened as ``stages.fetch`` opens videos (allowed demuxers, local file I/O only).
    Raises :class:`AudioError` for undecodable audio and :class:`LimitExceeded`
    (``limit_duration``) for audio past ``limits.max_duration_s``.
    """
    if window_s <= 0:
        raise ValueError(f"window_s must be positive, got {window_s}")
    limits = limits or LimitSettings()
    with open_container(path, limits) as container:
        stream = main_audio_stream(container)
        if stream is None:
            return
        if stream.codec_context is None:
            raise AudioError(
                f"no decoder for the {stream.codec_tag or 'unknown'} audio codec",
                code="audio_unsupported",
            )
        # One thread: audio decoding costs little next to recognising it.
        stream.codec_context.thread_count = 1
        windows = _Windows(round(window_s * SAMPLE_RATE), limits.max_duration_s, speech)
        zero_s = _timeline_zero(container, stream)
        wrap_s = _WRAP_S.get(container.format.name)
        for frame in _decoded(container, stream):
            yield from windows.add(frame, _frame_time(frame, stream, zero_s, wrap_s))
        yield from windows.finish()


def _timeline_zero(container: InputContainer, audio: av.AudioStream) -> float:
    """Where the video's time 0 lies on the container's clock: the start of its main video
    stream, so that audio and frame timestamps line up (MPEG-TS clocks start anywhere)."""
    stream: av.VideoStream | av.AudioStream | None = main_video_stream(container)
    if stream is None or stream.start_time is None:
        stream = audio
    if stream.start_time is None or stream.time_base is None:
        return 0.0
    return float(stream.start_time * stream.time_base)


def _frame_time(
    frame: av.AudioFrame, stream: av.AudioStream, zero_s: float, wrap_s: float | None
) -> float | None:
    """When ``frame`` starts, in seconds from the video's zero; None if it has no timestamp."""
    time_base = frame.time_base or stream.time_base
    if frame.pts is None or time_base is None:
        return None
    t = float(frame.pts * time_base) - zero_s
    if wrap_s is not None:  # the nearest reading of a wrapped clock: within half a wrap
        t = (t + wrap_s / 2) % wrap_s - wrap_s / 2
    return t


def _decoded(container: InputContainer, stream: av.AudioStream) -> Iterator[av.AudioFrame]:
    """The stream's frames; FFmpeg's errors become :class:`AudioError`."""
    try:
        for packet in container.demux(stream):
            yield from packet.decode()
    except av.error.FFmpegError as exc:
        raise AudioError(
            f"cannot decode the {stream.codec_context.name} audio: {exc}",
            code="audio_decode_error",
        ) from exc


class _Windows:
    """Cuts resampled audio into windows and keeps each window's start time right.

    A run is a stretch of contiguous samples. Its start time comes from its first decoded
    frame; later times come from counting samples, which do not drift the way timestamps
    rounded to the stream's time base would. A frame whose timestamp is more than
    ``_GAP_S`` off the count starts a new run, and so does a change of sample
    format, layout or rate (a resampler is set up for one).
    """

    def __init__(self, window: int, max_duration_s: float, speech: SpeechFinder | None) -> None:
        self._window = window
        self._speech = speech
        self._max_duration_s = max_duration_s
        self._resampler: av.AudioResampler | None = None
        self._source: tuple[str, str, int] | None = None
        self._next_input_s: float | None = None  # where the next input frame should start
        self._run_start_s = 0.0
        self._cut_samples = 0  # samples of the run already yielded in windows
        self._skip = 0  # samples still to drop: those before the video's zero
        self._parts: list[AudioSamples] = []
        self._held = 0  # samples in _parts

    def add(self, frame: av.AudioFrame, t: float | None) -> Iterator[AudioWindow]:
        """Take one decoded frame that starts at ``t`` seconds (None: right after the last)."""
        source = (frame.format.name, frame.layout.name, frame.sample_rate)
        expected = self._next_input_s
        start = expected if t is None else t
        jumped = start is not None and expected is not None and abs(start - expected) > _GAP_S
        if self._resampler is None or source != self._source or jumped:
            yield from self.finish()
            self._new_run(source, start or 0.0)
        elif expected is not None:
            start = expected
        self._next_input_s = (start or 0.0) + frame.samples / frame.sample_rate
        if self._next_input_s > self._max_duration_s:
            raise LimitExceeded(
                f"audio at {self._next_input_s:.1f} s, above the {self._max_duration_s} s limit",
                code="limit_duration",
            )
        yield from self._take(self._convert(frame))

    def finish(self) -> Iterator[AudioWindow]:
        """Flush the resampler and yield what is held; the next frame starts a new run."""
        if self._resampler is not None:
            yield from self._take(self._convert(None))
            self._resampler = None
        if self._held:
            yield self._cut(self._held)

    def _convert(self, frame: av.AudioFrame | None) -> list[av.AudioFrame]:
        assert self._resampler is not None
        try:
            return self._resampler.resample(frame)
        except (av.error.FFmpegError, ValueError) as exc:
            # A channel layout or sample format the resampler cannot convert from.
            raise AudioError(
                f"cannot convert the audio to 16 kHz mono: {exc}", code="audio_decode_error"
            ) from exc

    def _new_run(self, source: tuple[str, str, int], start_s: float) -> None:
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        self._source = source
        self._skip = round(-start_s * SAMPLE_RATE) if start_s < 0 else 0
        self._run_start_s = max(0.0, start_s)
        self._cut_samples = 0

    def _take(self, frames: list[av.AudioFrame]) -> Iterator[AudioWindow]:
        for frame in frames:
            # Packed "flt" mono: a 1 x n array.
            samples = np.asarray(frame.to_ndarray(), dtype=np.float32).reshape(-1)
            if self._skip:
                dropped = min(self._skip, len(samples))
                samples, self._skip = samples[dropped:], self._skip - dropped
            if len(samples):
                self._parts.append(samples)
                self._held += len(samples)
            while self._held >= self._window:
                joined = self._parts[0] if len(self._parts) == 1 else np.concatenate(self._parts)
                self._parts = [joined]
                yield self._cut(self._pause_cut(joined) or self._quiet_cut(joined))

    def _pause_cut(self, joined: AudioSamples) -> int | None:
        """The middle of the last pause between stretches of speech in the window's second
        half (after its last stretch, where speech ends before the window does); None without
        a finder or a pause. The same samples always give the same cut, so a resumed run cuts
        as the first did."""
        if self._speech is None:
            return None
        spans = self._speech(joined[: self._window])
        ends = [0, *(end for _, end in spans)]
        starts = [*(start for start, _ in spans), self._window]
        cuts = [
            (end + start) // 2
            for end, start in zip(ends, starts, strict=True)
            if start - end >= _PAUSE and (end + start) // 2 > self._window // 2
        ]
        return max(cuts) if cuts else None

    def _quiet_cut(self, joined: AudioSamples) -> int:
        """At the quietest moment of the window's last stretch; at the window's end when
        nothing there is markedly quieter than its end."""
        search = min(round(_CUT_SEARCH_S * SAMPLE_RATE), self._window // 3)
        step = round(_CUT_STEP_S * SAMPLE_RATE)
        steps = search // step
        if steps < 2:
            return self._window
        tail = joined[self._window - steps * step : self._window].reshape(steps, step)
        energy = np.square(tail, dtype=np.float64).mean(axis=1)
        quietest = int(np.argmin(energy))
        if energy[quietest] >= energy[-1] * _QUIETER:  # no quieter moment: cut at the end
            return self._window
        return self._window - (steps - 1 - quietest) * step - step // 2

    def _cut(self, count: int) -> AudioWindow:
        joined = self._parts[0] if len(self._parts) == 1 else np.concatenate(self._parts)
        start_s = self._run_start_s + self._cut_samples / SAMPLE_RATE
        window = AudioWindow(start_s, np.array(joined[:count], dtype=np.float32))
        rest = np.array(joined[count:], dtype=np.float32)  # no view pinning the window
        self._parts = [rest] if len(rest) else []
        self._held = len(rest)
        self._cut_samples += count
        return window
