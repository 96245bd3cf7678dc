"""Sample videos with known burned-in text: for tests, the local demo and benchmarks.

Every video is a sequence of scenes separated by hard cuts; each scene shows a few large,
high-contrast text lines (English and Chinese) on a flat background, optionally under film
grain. A scene may also say a sentence: demo videos then get an audio track spoken by
espeak-ng (``devkit.speech_videos``), or stay silent where espeak-ng is not installed. Because
the text and speech of every scene are known, OCR, speech recognition and search results can
be checked. Output is deterministic for a given seed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
from PIL import Image as PILImage
from PIL import ImageDraw

from core.records import Image
from devkit.fonts import cjk_font
from devkit.speech_videos import Utterance, espeak_path, speak_over

RGB = tuple[int, int, int]
Size = tuple[int, int]  # width, height
NoisePlane = npt.NDArray[np.int16]

# Grain for video frames is drawn from a bank of planes: fresh noise for every frame would cost
# more than the encoder; picking a random plane per frame still keeps consecutive frames distinct.
_GRAIN_BANK = 12

# A scene's sentence starts a little after its cut, as a speaker would, so it never begins
# exactly on a chunk or window boundary.
_SPEECH_LEAD_S = 0.3
# Whisper tiny.en hears espeak-ng's American voice better than its default British one: of
# twelve short sentences it got 12 word for word against 6 ("invoice" as "in voice").
_VOICE = "en-us"


@dataclass(frozen=True)
class Scene:
    """One shot: text lines on a flat background, held for ``seconds``; ``said`` is a
    sentence spoken from just after the shot begins (it may run on into the next shot)."""

    lines: tuple[str, ...]
    seconds: float
    background: RGB = (250, 250, 245)
    said: str = ""
    qr: str = ""  # a QR code of this text at the right of the frame, the lines left of it


@dataclass(frozen=True)
class SampleVideo:
    """A written sample video and what can be read in it."""

    path: Path
    scenes: tuple[Scene, ...]
    fps: int
    size: Size
    seed: int
    utterances: tuple[Utterance, ...] = ()  # what its audio track says; empty without one
    copy_of: str | None = None  # the sample this one re-uploads (re-encoded, cropped), if any

    @property
    def duration_s(self) -> float:
        return sum(scene.seconds for scene in self.scenes)

    @property
    def expected_texts(self) -> tuple[str, ...]:
        """Every text line shown, in order of first appearance, without repeats."""
        return tuple(dict.fromkeys(line for scene in self.scenes for line in scene.lines))

    @property
    def expected_speech(self) -> tuple[str, ...]:
        """Every sentence its audio track says, in order (none without a track)."""
        return tuple(utterance.text for utterance in self.utterances)

    @property
    def cut_times_s(self) -> tuple[float, ...]:
        """Start times of every scene after the first (the hard cuts)."""
        starts: list[float] = []
        t = 0.0
        for scene in self.scenes[:-1]:
            t += scene.seconds
            starts.append(t)
        return tuple(starts)


def _text_color(background: RGB) -> RGB:
    r, g, b = background
    luma = 0.299 * r + 0.587 * g + 0.114 * b
    return (10, 10, 10) if luma >= 128 else (250, 250, 250)


def _draw_text(lines: Sequence[str], size: Size, background: RGB) -> Image:
    width, height = size
    canvas = PILImage.new("RGB", size, background)
    if lines:
        draw = ImageDraw.Draw(canvas)
        font_px = max(12, height // 8)
        font = cjk_font(font_px)
        widest = max(draw.textlength(line, font=font) for line in lines)
        if widest > 0.9 * width:  # shrink long lines so they stay fully inside the frame
            font_px = max(12, int(font_px * 0.9 * width / widest))
            font = cjk_font(font_px)
        line_h = int(font_px * 1.5)
        top = (height - line_h * len(lines)) // 2 + line_h // 2
        color = _text_color(background)
        for i, line in enumerate(lines):
            draw.text((width / 2, top + i * line_h), line, font=font, fill=color, anchor="mm")
    return np.asarray(canvas, dtype=np.uint8).copy()


def _draw_scene(scene: Scene, size: Size) -> Image:
    """The scene's picture: its lines, and its QR code (a third of the frame's height, with
    its quiet zone) at the right with the lines in the room left of it."""
    if not scene.qr:
        return _draw_text(scene.lines, size, scene.background)
    width, height = size
    side = height // 3
    text_width = width - side - height // 10
    picture = np.empty((height, width, 3), dtype=np.uint8)
    picture[:] = scene.background
    picture[:, :text_width] = _draw_text(scene.lines, (text_width, height), scene.background)
    top, left = (height - side) // 2, text_width
    picture[top : top + side, left : left + side] = qr_image(scene.qr, side)
    return picture


def qr_image(text: str, side: int) -> Image:
    """A QR code of ``text``, black on white with its quiet zone, ``side`` pixels square."""
    import zxingcpp

    barcode = zxingcpp.create_barcode(text, zxingcpp.BarcodeFormat.QRCode)
    code = PILImage.fromarray(np.asarray(barcode.to_image(scale=8))).convert("RGB")
    return np.asarray(code.resize((side, side), PILImage.Resampling.NEAREST), dtype=np.uint8)


def _add_grain(image: Image, rng: np.random.Generator, grain: float) -> Image:
    if grain <= 0:
        return image
    return _apply_noise(image, _noise_plane(image.shape[:2], rng, grain))


def _noise_plane(shape: tuple[int, ...], rng: np.random.Generator, grain: float) -> NoisePlane:
    # Luma-only grain: one noise plane shared by the three channels, like film grain.
    noise = rng.standard_normal(shape, dtype=np.float32) * np.float32(grain)
    plane: NoisePlane = np.clip(np.rint(noise), -255, 255).astype(np.int16)
    return plane


def _apply_noise(image: Image, noise: NoisePlane) -> Image:
    noisy = image.astype(np.int16) + noise[:, :, None]
    pixels: Image = np.clip(noisy, 0, 255).astype(np.uint8)
    return pixels


def render_frame(
    lines: Sequence[str],
    *,
    size: Size = (1280, 720),
    background: RGB = (250, 250, 245),
    seed: int | None = None,
    grain: float = 0.0,
) -> Image:
    """One H x W x 3 RGB frame with ``lines`` centred in large high-contrast type.

    ``grain`` is the standard deviation (in 0-255 levels) of gaussian film grain; ``seed``
    makes the grain reproducible.
    """
    image = _draw_text(lines, size, background)
    return _add_grain(image, np.random.default_rng(seed), grain)


@lru_cache(maxsize=1)
def _x264_options(crf: int) -> dict[str, str]:
    # A fixed preset and one thread keep x264's output the same from run to run, except that its
    # AVX-512 code makes the bytes vary between runs of one process (seen on a Xeon with
    # avx512bw/vl). Where the CPU has AVX-512, x264 is held to its AVX2 code: as fast here, and
    # the same bytes every time.
    options = {"crf": str(crf), "preset": "veryfast", "threads": "1"}
    if "avx512f" in _cpu_flags():
        options["x264-params"] = "asm=avx2"
    return options


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def _encoder_name(codec: str) -> str:
    return "libx264" if codec in ("h264", "libx264") else codec


def write_video(
    path: str | Path,
    scenes: Sequence[Scene],
    *,
    fps: int = 25,
    size: Size = (1280, 720),
    codec: str = "h264",
    grain: float = 0.0,
    seed: int = 0,
    gop: int | None = None,
    crf: int = 23,
) -> Path:
    """Encode ``scenes`` back to back (hard cuts) into a video file and return its path.

    The container follows the file suffix (``.mp4``, ``.mkv``, ...). ``codec="h264"`` encodes
    with libx264 in yuv420p; ``gop`` caps the distance between key frames (x264 also puts a
    key frame at every cut on its own).
    """
    if not scenes:
        raise ValueError("a video needs at least one scene")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    encoder = _encoder_name(codec)
    with av.open(str(out), mode="w") as container:
        stream = container.add_stream(encoder, rate=fps)
        if not isinstance(stream, av.VideoStream):
            raise ValueError(f"{codec!r} is not a video codec")
        stream.width, stream.height = size
        stream.pix_fmt = "yuvj420p" if encoder == "mjpeg" else "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
        if encoder == "libx264":
            stream.options = dict(_x264_options(crf))
        time_base = Fraction(1, fps)
        pts = 0
        bank = [_noise_plane((size[1], size[0]), rng, grain) for _ in range(_GRAIN_BANK)]
        for scene in scenes:
            base = _draw_scene(scene, size)
            for _ in range(max(1, round(scene.seconds * fps))):
                pixels = _apply_noise(base, bank[rng.integers(len(bank))]) if grain > 0 else base
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                frame = frame.reformat(format=stream.pix_fmt)
                frame.pts = pts
                frame.time_base = time_base
                pts += 1
                container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out


def demo_scenes() -> dict[str, tuple[Scene, ...]]:
    """The scenes of the demo videos, by name: English and Chinese text, 4-8 s each; some say
    an English sentence (without numbers, which Whisper may write as digits or as words),
    each over before its video ends."""
    white, navy, cream, black = (250, 250, 245), (20, 30, 90), (245, 235, 200), (15, 15, 15)
    teal, maroon = (10, 90, 90), (110, 20, 30)
    return {
        "invoice": (
            Scene(("INVOICE 2048",), 2.0, white, said="Please check the invoice before paying."),
            Scene(("Hello Reelsense",), 2.0, navy),
            Scene(("欢迎光临",), 2.0, cream, said="Welcome to our shop."),
        ),
        "datacenter": (
            Scene(("数据中心",), 2.5, black, said="The data center never sleeps."),
            Scene(("SERVER ROOM B7",), 2.5, white, said="Please follow me inside."),
        ),
        "shop": (
            Scene(("OPEN 24 HOURS", "欢迎光临"), 3.0, teal),
            Scene(("SALE 50%",), 2.0, cream),
            Scene(("谢谢惠顾",), 2.0, maroon),
        ),
        # What a reviewer must see: a phone number and a WeChat id on screen, and a QR code.
        "ad": (
            Scene(("限时优惠", "咨询热线 138 1234 5678"), 3.0, white),
            Scene(
                ("扫码进群", "加微信 shop_8888"),
                3.0,
                cream,
                said="Scan the code to join our group.",
                qr="https://t.cn/A6abcdEf",
            ),
        ),
        "lecture": (
            Scene(("VECTOR SEARCH 101",), 2.0, white, said="Welcome to the lecture."),
            Scene(("人工智能",), 2.0, navy, said="Today we talk about search."),
            Scene(("QUESTIONS?",), 2.0, black, said="Do you have any questions?"),
            Scene(("再见",), 2.0, cream, said="Thank you and goodbye."),
        ),
        "station": (
            Scene(("PLATFORM 9",), 2.0, maroon),
            Scene(("北京南站",), 2.0, white),
        ),
    }


def write_demo_videos(
    folder: str | Path, count: int = 4, *, seed: int = 0, grain: float = 0.0, fps: int = 25
) -> list[SampleVideo]:
    """Write ``count`` short 720p demo videos (up to 6) into ``folder``; deterministic by seed.

    Scenes that say something give their video an AAC audio track of espeak-ng's speech
    (``SampleVideo.utterances``); without espeak-ng those videos are written silent. Without
    grain a 6 s video encodes in about 2 CPU-s; ``grain=4`` looks more like a camera but
    roughly triples the encoding time.
    """
    specs = list(demo_scenes().items())
    if not 1 <= count <= len(specs):
        raise ValueError(f"count must be between 1 and {len(specs)}")
    videos: list[SampleVideo] = []
    for i, (name, scenes) in enumerate(specs[:count]):
        path = Path(folder) / f"{name}.mp4"
        script = _script(scenes)
        if not script or espeak_path() is None:
            write_video(path, scenes, fps=fps, grain=grain, seed=seed + i)
            videos.append(SampleVideo(path, scenes, fps, (1280, 720), seed + i))
            continue
        with tempfile.TemporaryDirectory(prefix=f"reelsense-{name}-") as scratch:
            silent = write_video(
                Path(scratch) / path.name, scenes, fps=fps, grain=grain, seed=seed + i
            )
            utterances = speak_over(silent, script, path, Path(scratch), voice=_VOICE)
        videos.append(SampleVideo(path, scenes, fps, (1280, 720), seed + i, utterances))
    return videos


def _script(scenes: Sequence[Scene]) -> list[tuple[float, str]]:
    """When each scene's sentence is spoken: ``(start_s, sentence)``, in order."""
    script: list[tuple[float, str]] = []
    start = 0.0
    for scene in scenes:
        if scene.said:
            script.append((start + _SPEECH_LEAD_S, scene.said))
        start += scene.seconds
    return script


def write_long_video(
    path: str | Path,
    seconds: float = 30.0,
    *,
    fps: int = 25,
    size: Size = (1280, 720),
    grain: float = 6.0,
    scene_seconds: float = 4.0,
    seed: int = 0,
) -> SampleVideo:
    """A longer grainy video for benchmarks: the demo texts cycled in ``scene_seconds`` shots.

    ``grain=6`` gives about 8 Mbit/s at 720p, like camera footage; the grain sets the bitrate
    and so the decoding cost (``grain=12`` is about 20 Mbit/s).
    """
    pool = [scene for scenes in demo_scenes().values() for scene in scenes]
    scenes: list[Scene] = []
    left = seconds
    while left > 1e-9:
        template = pool[len(scenes) % len(pool)]
        length = min(scene_seconds, left)
        scenes.append(Scene(template.lines, length, template.background))
        left -= length
    write_video(path, scenes, fps=fps, size=size, grain=grain, seed=seed)
    return SampleVideo(Path(path), tuple(scenes), fps, size, seed)
