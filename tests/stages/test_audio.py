"""audio_windows: a video's audio track as 16 kHz mono windows with their times, and its
failures (no track, corrupt data, too long)."""

from __future__ import annotations

import tracemalloc
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from core.config import LimitSettings
from core.errors import PermanentError
from devkit.speech_videos import mux_audio, write_plain_video, write_tone
from stages.audio import SAMPLE_RATE, AudioError, AudioWindow, audio_windows
from stages.errors import LimitExceeded


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audio")


@pytest.fixture(scope="module")
def silent_video(media: Path) -> Path:
    """12 s of picture, no audio track."""
    return write_plain_video(media / "silent.mp4", 12.0)


@pytest.fixture(scope="module")
def tone(media: Path) -> Path:
    return write_tone(media / "tone.wav", 1.0, hz=1000.0)


def sound_span(windows: list[AudioWindow], level: float = 0.1) -> tuple[float, float]:
    """First and last time at which the audio is louder than ``level``."""
    times = [w.start_s + np.flatnonzero(np.abs(w.samples) > level) / SAMPLE_RATE for w in windows]
    loud = np.concatenate(times)
    assert len(loud), "no sound found"
    return float(loud[0]), float(loud[-1])


def write_pcm_track(path: Path, runs: list[tuple[float, float]], rate: int = 8000) -> Path:
    """An mkv with only a PCM track that plays each ``(start_s, seconds)`` of quiet noise, and
    nothing between them: a recording with gaps in its timestamps."""
    rng = np.random.default_rng(0)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("pcm_s16le", rate=rate, layout="mono")
        for start, seconds in runs:
            at, end = round(start * rate), round((start + seconds) * rate)
            while at < end:
                n = min(1024, end - at)
                pcm = (rng.standard_normal((1, n)) * 1000).astype(np.int16)
                frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
                frame.sample_rate, frame.pts, frame.time_base = rate, at, Fraction(1, rate)
                out.mux(stream.encode(frame))
                at += n
        out.mux(stream.encode(None))
    return path


def test_a_video_without_audio_yields_no_window(silent_video: Path) -> None:
    assert list(audio_windows(silent_video)) == []


def test_windows_cover_the_track_in_order(media: Path, silent_video: Path, tone: Path) -> None:
    # PCM, so that the samples that come back are exactly the ones written.
    video = mux_audio(silent_video, [(6.0, tone)], media / "pcm.mkv", codec="pcm_s16le")
    windows = list(audio_windows(video, window_s=5.0))
    assert [w.start_s for w in windows] == [0.0, 5.0, 10.0]
    assert [len(w.samples) for w in windows] == [5 * SAMPLE_RATE, 5 * SAMPLE_RATE, 2 * SAMPLE_RATE]
    assert all(w.samples.dtype == np.float32 and w.samples.ndim == 1 for w in windows)
    whole = list(audio_windows(video, window_s=30.0))
    assert len(whole) == 1
    assert np.array_equal(np.concatenate([w.samples for w in windows]), whole[0].samples)
    start, end = sound_span(windows)
    assert start == pytest.approx(6.0, abs=0.002)
    assert end == pytest.approx(7.0, abs=0.002)


@pytest.mark.parametrize("suffix", [".mp4", ".mkv", ".ts"])
def test_times_are_on_the_videos_timeline(
    media: Path, silent_video: Path, tone: Path, suffix: str
) -> None:
    # AAC starts with a priming frame that containers hide in different ways (an edit list in
    # mp4, a shifted video clock in MPEG-TS): the tone must still be where it was put.
    video = mux_audio(silent_video, [(2.0, tone)], media / f"aac{suffix}")
    windows = list(audio_windows(video, window_s=4.0))
    # The encoder pads the last AAC frame: a few ms may follow the 12 s.
    assert [w.start_s for w in windows][:3] == [0.0, 4.0, 8.0]
    assert sum(w.duration_s for w in windows) == pytest.approx(12.0, abs=0.03)
    start, end = sound_span(windows)
    assert start == pytest.approx(2.0, abs=0.005)
    assert end == pytest.approx(3.0, abs=0.005)


@pytest.mark.parametrize("codec", ["pcm_s16le", "aac"])
def test_44k_stereo_is_resampled_to_16k_mono(
    media: Path, silent_video: Path, tone: Path, codec: str
) -> None:
    video = mux_audio(
        silent_video, [(1.0, tone)], media / f"stereo-{codec}.mkv",
        rate=44_100, layout="stereo", codec=codec,
    )  # fmt: skip
    with av.open(str(video)) as container:
        track = container.streams.audio[0]
        assert (track.sample_rate, track.layout.nb_channels) == (44_100, 2)
    samples = np.concatenate([w.samples for w in audio_windows(video)])
    if codec == "pcm_s16le":
        assert len(samples) == 12 * SAMPLE_RATE
    else:  # the encoder pads the last AAC frame (1024 samples at 44.1 kHz)
        assert 12 * SAMPLE_RATE <= len(samples) <= 12 * SAMPLE_RATE + 1024 * 16_000 // 44_100 + 1
    # The same tone on both channels keeps its level when mixed down to one.
    assert float(np.abs(samples).max()) == pytest.approx(0.5, abs=0.03)


def test_a_gap_in_the_timestamps_starts_a_new_window(media: Path) -> None:
    track = write_pcm_track(media / "gaps.mkv", [(0.0, 2.0), (5.0, 1.5)])
    windows = list(audio_windows(track, window_s=30.0))
    assert [round(w.start_s, 3) for w in windows] == [0.0, 5.0]
    assert [len(w.samples) for w in windows] == [2 * SAMPLE_RATE, 3 * SAMPLE_RATE // 2]


def test_corrupt_audio_raises_audio_error(media: Path, silent_video: Path, tone: Path) -> None:
    good = mux_audio(silent_video, [(0.0, tone), (4.0, tone), (8.0, tone)], media / "ok.mp4")
    with av.open(str(good)) as container:
        spans = [(p.pos, p.size) for p in container.demux(audio=0) if p.pos is not None]
    data = bytearray(good.read_bytes())
    rng = np.random.default_rng(3)
    for pos, size in spans[200:260]:  # audio packets from about 4.6 s on
        data[pos : pos + size] = rng.bytes(size)
    bad = media / "corrupt.mp4"
    bad.write_bytes(bytes(data))
    received: list[AudioWindow] = []
    with pytest.raises(AudioError) as failure:
        received.extend(audio_windows(bad, window_s=2.0))
    assert failure.value.code == "audio_decode_error"
    assert isinstance(failure.value, PermanentError)
    assert [w.start_s for w in received] == [0.0, 2.0]  # what came before the damage


def test_audio_longer_than_the_limit_is_refused(media: Path, silent_video: Path) -> None:
    video = mux_audio(silent_video, [], media / "long.mkv", codec="pcm_s16le")
    limits = LimitSettings(max_duration_s=5.0)
    with pytest.raises(LimitExceeded) as failure:
        list(audio_windows(video, window_s=2.0, limits=limits))
    assert failure.value.code == "limit_duration"


def test_memory_stays_flat_on_a_long_track(media: Path) -> None:
    # 5 minutes is 19 MB at 16 kHz float32; windows of 10 s are 0.64 MB each.
    track = write_pcm_track(media / "long.mkv", [(0.0, 300.0)])
    tracemalloc.start()
    try:
        count = sum(1 for _ in audio_windows(track, window_s=10.0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 30
    assert peak < 4 * 1024 * 1024


def test_window_length_must_be_positive(silent_video: Path) -> None:
    with pytest.raises(ValueError, match="window_s"):
        list(audio_windows(silent_video, window_s=0.0))
