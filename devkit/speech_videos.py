"""Test videos with known speech: sentences spoken by espeak-ng, laid on a video's audio track
at known times, so that speech recognition can be checked for words and timing.

``synthesize`` writes one sentence to a WAV with the ``espeak-ng`` command (Debian package
``espeak-ng``); ``mux_audio`` copies a video's packets into a new file with one audio track in
which each WAV starts at its given time and silence fills the rest; ``write_speech_video``
does both from a script and returns where each sentence really is; ``voiced_span`` finds
the voice within a WAV, without the silence around it. The same inputs give the
same bytes: espeak-ng, the resampler and FFmpeg's AAC encoder are deterministic, and the
muxer is told to write no creation time or library version.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt

ESPEAK = "espeak-ng"
WORDS_PER_MINUTE = 175  # espeak-ng's default
_FRAME_SAMPLES = 1024  # one AAC frame
VOICE_THRESHOLD = 0.01  # -40 dBFS: above espeak-ng's silence, below its quietest phoneme

Samples = npt.NDArray[np.float32]  # channels x samples, -1..1


def espeak_path() -> str | None:
    """The ``espeak-ng`` executable, or None where it is not installed."""
    return shutil.which(ESPEAK)


def synthesize(
    text: str, path: Path, voice: str = "en", *, words_per_minute: int = WORDS_PER_MINUTE
) -> Path:
    """Speak ``text`` with espeak-ng into a WAV file (22.05 kHz mono, 16 bit) at ``path``."""
    exe = espeak_path()
    if exe is None:
        raise RuntimeError(f"{ESPEAK} is not installed (Debian package {ESPEAK})")
    path.parent.mkdir(parents=True, exist_ok=True)
    # "--" ends the options: a sentence starting with "-" is spoken, not parsed.
    command = [exe, "-v", voice, "-s", str(words_per_minute), "-w", str(path), "--", text]
    result = subprocess.run(  # noqa: S603 - espeak-ng found on PATH, argv built here
        command, capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0 or not path.is_file():
        raise RuntimeError(f"{ESPEAK} failed ({result.returncode}): {result.stderr.strip()}")
    return path


def read_audio(path: Path, rate: int, layout: str = "mono") -> Samples:
    """All of an audio file's first audio track as ``channels x samples`` float32 at ``rate``."""
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=rate)
    planes: list[Samples] = []
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        for frame in container.decode(stream):
            planes.extend(_planes(out) for out in resampler.resample(frame))
        planes.extend(_planes(out) for out in resampler.resample(None))
    channels = av.AudioLayout(layout).nb_channels
    if not planes:
        return np.zeros((channels, 0), np.float32)
    return np.concatenate(planes, axis=1)


def _planes(frame: av.AudioFrame) -> Samples:
    return np.asarray(frame.to_ndarray(), dtype=np.float32)


def _native(path: Path) -> tuple[Samples, int]:
    """An audio file's samples (mono) at its own rate, and that rate."""
    with av.open(str(path)) as container:
        rate = container.streams.audio[0].sample_rate
    return read_audio(path, rate), rate


def audio_seconds(path: Path) -> float:
    """How long an audio file plays (decoded samples over the sample rate)."""
    samples, rate = _native(path)
    return int(samples.shape[1]) / rate


def voiced_span(path: Path, *, threshold: float = VOICE_THRESHOLD) -> tuple[float, float]:
    """Where the voice in an audio file is: from its first sample louder than ``threshold`` to
    its last, in seconds from the file's start ((0, 0) for silence). espeak-ng starts a WAV with
    up to 50 ms of silence and ends it with about 0.3 s, which a timing check must not count."""
    samples, rate = _native(path)
    loud = np.flatnonzero(np.abs(samples).max(axis=0, initial=0.0) > threshold)
    if loud.size == 0:
        return 0.0, 0.0
    return float(loud[0]) / rate, float(loud[-1] + 1) / rate


def mux_audio(
    video_path: Path,
    wav_segments: Sequence[tuple[float, Path]],
    out_path: Path,
    *,
    rate: int = 44_100,
    layout: str = "mono",
    codec: str = "aac",
) -> Path:
    """A copy of ``video_path`` (its video packets, unchanged) with one audio track in which
    each ``(start_s, wav)`` plays from ``start_s``, overlaps mixed, silence elsewhere.

    The track lasts as long as the video or the last sound, whichever ends later. Audio
    tracks of the input are dropped. ``codec`` may be any audio encoder the container takes
    (``pcm_s16le`` in ``.mov``/``.mkv`` for samples that come back exactly).
    """
    if any(start < 0 for start, _ in wav_segments):
        raise ValueError("a sound cannot start before the video")
    sounds = [(round(start * rate), read_audio(wav, rate, layout)) for start, wav in wav_segments]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # Written without creation time or library versions, so the same inputs give the same bytes.
    with (
        av.open(str(video_path)) as source,
        av.open(str(out_path), mode="w", container_options={"fflags": "+bitexact"}) as out,
    ):
        if not source.streams.video:
            raise ValueError(f"{video_path} has no video stream")
        video_in = source.streams.video[0]
        video_out = out.add_stream_from_template(video_in)
        audio = out.add_stream(codec, rate=rate, layout=layout)
        if not isinstance(audio, av.AudioStream):
            raise ValueError(f"{codec!r} is not an audio codec")
        audio.codec_context.flags |= av.codec.context.Flags.bitexact
        end_s = _copy_packets(source, video_in, out, video_out)
        total = max([math.ceil(end_s * rate)] + [at + s.shape[1] for at, s in sounds])
        _encode_track(out, audio, _mix(sounds, total, av.AudioLayout(layout).nb_channels))
    return out_path


def _copy_packets(
    source: av.container.InputContainer,
    stream: av.VideoStream,
    out: av.container.OutputContainer,
    into: av.VideoStream,
) -> float:
    """Copy every packet of ``stream``; returns where the video ends, in seconds from its start."""
    start = stream.start_time or 0
    time_base = stream.time_base or Fraction(1, 90_000)
    end = 0.0
    for packet in source.demux(stream):
        if packet.dts is None:  # the flush packet demux ends with
            continue
        if packet.pts is not None:
            end = max(end, float((packet.pts + (packet.duration or 0) - start) * time_base))
        packet.stream = into
        out.mux(packet)
    return end


def _mix(sounds: Sequence[tuple[int, Samples]], total: int, channels: int) -> Samples:
    track = np.zeros((channels, total), np.float32)
    for at, sound in sounds:
        track[:, at : at + sound.shape[1]] += sound
    return np.clip(track, -1.0, 1.0)


def _encode_track(
    out: av.container.OutputContainer, stream: av.AudioStream, track: Samples
) -> None:
    layout, rate = stream.layout.name, stream.rate
    for at in range(0, track.shape[1], _FRAME_SAMPLES):
        block = np.ascontiguousarray(track[:, at : at + _FRAME_SAMPLES])
        frame = av.AudioFrame.from_ndarray(block, format="fltp", layout=layout)
        frame.sample_rate, frame.pts, frame.time_base = rate, at, Fraction(1, rate)
        out.mux(stream.encode(frame))
    out.mux(stream.encode(None))


def write_plain_video(
    path: Path, seconds: float, *, fps: int = 10, size: tuple[int, int] = (96, 64)
) -> Path:
    """A small H.264 video of flat grey frames without audio: a cheap base to lay speech on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w", container_options={"fflags": "+bitexact"}) as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "ultrafast", "threads": "1"}
        for i in range(max(1, round(seconds * fps))):
            grey = np.full((size[1], size[0], 3), 40 + (i * 5) % 160, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(grey, format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


@dataclass(frozen=True)
class Utterance:
    """One spoken sentence: its text and where its sound lies on the video's timeline (the
    WAV's span, which includes espeak-ng's short leading and trailing silence)."""

    text: str
    start_s: float
    end_s: float
    voice: str = "en"  # the espeak-ng voice that says it ("de", "es", "en-us")


# A sentence of a script: when it starts and what it says, in the video's voice or its own.
ScriptLine = tuple[float, str] | tuple[float, str, str]


@dataclass(frozen=True)
class SpeechTruth:
    path: Path
    duration_s: float
    utterances: tuple[Utterance, ...]


def write_speech_video(
    out_path: Path,
    script: Sequence[ScriptLine],
    *,
    seconds: float,
    workdir: Path,
    voice: str = "en",
    rate: int = 44_100,
    layout: str = "mono",
) -> SpeechTruth:
    """A ``seconds`` long video in which each ``(start_s, sentence[, voice])`` of ``script`` is
    spoken from ``start_s``; the WAVs and the silent base video are left in ``workdir``."""
    base = write_plain_video(workdir / f"{out_path.stem}.base.mp4", seconds)
    utterances = speak_over(base, script, out_path, workdir, voice=voice, rate=rate, layout=layout)
    duration = max([float(seconds)] + [u.end_s for u in utterances])
    return SpeechTruth(out_path, duration, utterances)


def speak_over(
    video: Path,
    script: Sequence[ScriptLine],
    out_path: Path,
    workdir: Path,
    *,
    voice: str = "en",
    rate: int = 44_100,
    layout: str = "mono",
) -> tuple[Utterance, ...]:
    """``video`` with each ``(start_s, sentence)`` of ``script`` spoken on its audio track
    from ``start_s``, written to ``out_path``; the WAVs are left in ``workdir``."""
    sounds: list[tuple[float, Path]] = []
    utterances: list[Utterance] = []
    for i, (start, text, *own) in enumerate(script):
        said_in = own[0] if own else voice
        wav = synthesize(text, workdir / f"{out_path.stem}.{i}.wav", said_in)
        sounds.append((start, wav))
        utterances.append(Utterance(text, start, start + audio_seconds(wav), said_in))
    mux_audio(video, sounds, out_path, rate=rate, layout=layout)
    return tuple(utterances)


def write_tone(
    path: Path, seconds: float, *, hz: float = 440.0, rate: int = 22_050, amplitude: float = 0.5
) -> Path:
    """A sine tone as a 16-bit mono WAV: a sound whose position is easy to find again."""
    t = np.arange(round(seconds * rate)) / rate
    return write_wav(path, amplitude * np.sin(2 * np.pi * hz * t), rate)


def write_wav(path: Path, samples: npt.NDArray[np.floating], rate: int) -> Path:
    """Mono samples in [-1, 1] as a 16-bit WAV at ``path``."""
    pcm = np.round(np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path
