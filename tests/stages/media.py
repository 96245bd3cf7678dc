"""Builders of small test media: good, broken, odd-shaped and tricky files."""

from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image as PILImage

from devkit.samples import Scene, render_frame, write_video

SMALL = (320, 180)


def write_clip(
    path: Path,
    seconds: float = 4.0,
    *,
    fps: int = 25,
    size: tuple[int, int] = SMALL,
    gop: int | None = None,
    grain: float = 0.0,
) -> Path:
    """A clip with a new scene (and text) every second."""
    whole = int(seconds)
    scenes = [
        Scene((f"SCENE {i}",), 1.0, (250, 250, 245) if i % 2 else (20, 30, 90))
        for i in range(whole)
    ]
    if seconds - whole > 1e-9:
        scenes.append(Scene(("TAIL",), seconds - whole))
    return write_video(path, scenes, fps=fps, size=size, gop=gop, grain=grain)


def write_vfr_clip(
    path: Path, times_s: list[float], size: tuple[int, int] = SMALL, *, gop: int | None = None
) -> Path:
    """H.264 frames at exactly the given presentation times (variable frame rate); ``gop``
    caps the frames between key frames."""
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=25)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
        stream.codec_context.time_base = Fraction(1, 1000)
        stream.options = {"preset": "veryfast", "threads": "1"}
        for t in times_s:
            pixels = render_frame([f"T {t:.2f}"], size=size)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(format="yuv420p")
            frame.pts = round(t * 1000)
            frame.time_base = Fraction(1, 1000)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def write_with_audio(path: Path, seconds: float = 2.0, *, size: tuple[int, int] = SMALL) -> Path:
    """Video plus an AAC track of silence."""
    rate, fps = 44_100, 25
    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=fps)
        assert isinstance(video, av.VideoStream)
        video.width, video.height = size
        video.pix_fmt = "yuv420p"
        audio = container.add_stream("aac", rate=rate)
        assert isinstance(audio, av.AudioStream)
        pixels = render_frame(["AUDIO"], size=size)
        for i in range(round(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(format="yuv420p")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        _write_silence(container, audio, seconds, rate)
    return path


def write_audio_only(path: Path, seconds: float = 2.0) -> Path:
    rate = 44_100
    with av.open(str(path), mode="w") as container:
        audio = container.add_stream("aac", rate=rate)
        assert isinstance(audio, av.AudioStream)
        _write_silence(container, audio, seconds, rate)
    return path


def _write_silence(
    container: av.container.OutputContainer, audio: av.AudioStream, seconds: float, rate: int
) -> None:
    samples = 1024
    for i in range(int(seconds * rate / samples)):
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, samples), np.float32), format="fltp", layout="mono"
        )
        frame.sample_rate = rate
        frame.pts = i * samples
        container.mux(audio.encode(frame))
    container.mux(audio.encode(None))


def write_image_as_mp4(path: Path) -> Path:
    """A PNG picture saved under a video's name."""
    PILImage.fromarray(render_frame(["NOT A VIDEO"], size=SMALL)).save(path, format="PNG")
    return path


def write_random_bytes(path: Path, size: int = 64 * 1024, seed: int = 0) -> Path:
    path.write_bytes(np.random.default_rng(seed).bytes(size))
    return path


def truncate(path: Path, fraction: float) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


def corrupt_middle(path: Path, length: int = 20_000, seed: int = 1) -> Path:
    """Overwrite ``length`` bytes in the middle of the file with random bytes."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + length] = np.random.default_rng(seed).bytes(length)
    path.write_bytes(bytes(data))
    return path


def set_mp4_rotation(path: Path, degrees: int) -> Path:
    """Write a display matrix into the mp4 track header, as phones do for portrait shots.

    ``degrees`` is counterclockwise, as FFmpeg reports it (a phone's portrait shot is -90).
    """
    data = bytearray(path.read_bytes())
    at = data.index(b"tkhd")
    version = data[at + 4]
    matrix_at = at + (56 if version == 1 else 44)
    cos, sin = {0: (1, 0), 90: (0, 1), 180: (-1, 0), -90: (0, -1), 270: (0, -1)}[degrees]
    fixed = [cos, -sin, 0, sin, cos, 0, 0, 0]
    values = [v * 0x10000 for v in fixed] + [0x40000000]
    data[matrix_at : matrix_at + 36] = struct.pack(">9i", *values)
    path.write_bytes(bytes(data))
    return path


def write_plain(
    path: Path,
    seconds: float,
    *,
    fps: int = 10,
    size: tuple[int, int] = (64, 64),
    codec: str = "libx264",
    container: str | None = None,
    options: dict[str, str] | None = None,
    audio_streams: int = 0,
) -> Path:
    """Flat frames of changing grey (no text: the cheapest valid frames to encode and decode),
    with ``audio_streams`` tracks of silence. ``container`` and its muxer ``options`` pick the
    format (by default the file's suffix; ``matroska`` with ``live=1`` writes no Duration)."""
    with av.open(str(path), mode="w", format=container, options=options or {}) as out:
        stream = out.add_stream(codec, rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        if codec == "libx264":
            stream.options = {"preset": "ultrafast", "threads": "1"}
        audios = [out.add_stream("aac", rate=8000) for _ in range(audio_streams)]
        for i in range(max(1, round(seconds * fps))):
            shade = np.full((size[1], size[0], 3), (i * 7) % 256, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(shade, format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
        for audio in audios:
            assert isinstance(audio, av.AudioStream)
            silence = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            silence.sample_rate, silence.pts = 8000, 0
            out.mux(audio.encode(silence))
            out.mux(audio.encode(None))
    return path


def concatenate(path: Path, *parts: Path) -> Path:
    """MPEG-TS files played one after the other, byte for byte: each part restarts the clock
    and may bring its own frame size, as a live stream that was spliced would."""
    path.write_bytes(b"".join(part.read_bytes() for part in parts))
    return path
