"""Edited test videos whose ground truth is known: shots joined by cuts, dissolves and fades,
camera pans and flashes that are not boundaries, and on-screen text with known times.

Each shot shows a smooth coloured texture (random, seeded) that may pan, and optionally
captions in light boxes at the bottom or the top of the frame, each from a given time within the
shot to its end or an earlier time. ``write_edit`` encodes the shots with H.264 and returns the
truth: the boundary times (a cut at the first frame of the new shot, a transition at its middle)
and every caption's on-screen interval. A caption that one shot shows up to its end and the next,
entered by a cut, shows from its start (same text, same place) is one caption on screen, held
across the cut, and the truth has it once. Speech is laid on an edit's audio track afterwards
(``bench.quality.corpus``), and its sentences join the truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from core.records import Image
from devkit.fonts import cjk_font
from devkit.samples import Size
from devkit.speech_videos import Utterance

_TEXTURE_CELLS = (12, 7)
_PLACES = {"bottom": 0.8, "top": 0.15}  # a caption's vertical centre, as a share of the height


@dataclass(frozen=True)
class Caption:
    """Text shown in a shot from ``from_s`` into it until ``until_s`` (None: its end), in a
    light box centred at the ``where`` ("bottom" or "top") of the frame."""

    text: str
    from_s: float = 0.0
    until_s: float | None = None
    where: str = "bottom"

    def shown_at(self, t: float) -> bool:
        return self.from_s <= t and (self.until_s is None or t < self.until_s)


@dataclass(frozen=True)
class Shot:
    """One shot: ``seconds`` long, entered by ``enter`` ("cut", "dissolve" or "fade") over
    ``transition_s`` (the first shot's ``enter`` is ignored). ``caption`` shows at the bottom
    from ``caption_from_s`` into the shot until ``caption_until_s`` (None: until it ends);
    ``more_captions`` are shown too; ``flash_at_s`` puts one white frame there; ``flat``
    shows one colour in place of the texture."""

    seconds: float
    enter: str = "cut"
    transition_s: float = 0.0
    pan_px_per_s: float = 0.0
    caption: str = ""
    caption_from_s: float = 0.0
    flash_at_s: float | None = None
    seed: int = 0
    caption_until_s: float | None = None
    more_captions: tuple[Caption, ...] = ()
    flat: tuple[int, int, int] | None = None  # one colour (black: an intro) for the texture

    def captions(self) -> tuple[Caption, ...]:
        main = Caption(self.caption, self.caption_from_s, self.caption_until_s)
        return ((main,) if self.caption else ()) + self.more_captions


@dataclass(frozen=True)
class EditTruth:
    """What is in a written edit."""

    path: Path
    duration_s: float
    boundaries: tuple[tuple[float, str], ...]  # (time, "cut" | "dissolve" | "fade")
    captions: tuple[tuple[str, float, float], ...]  # (text, start, end)
    flashes: tuple[float, ...] = field(default=())
    # Sentences on the audio track, from the first sound of their voice to the last (laid by
    # ``bench.quality.corpus``); none: the edit has no audio track.
    utterances: tuple[Utterance, ...] = field(default=())


def _texture(shot: Shot, size: Size) -> Image:
    """A smooth random colour field, wide enough to pan across for the whole shot."""
    width, height = size
    extra = int(abs(shot.pan_px_per_s) * (shot.seconds + shot.transition_s)) + 2
    if shot.flat is not None:
        return np.full((height, width + extra, 3), shot.flat, dtype=np.uint8)
    rng = np.random.default_rng(shot.seed)
    cells = rng.integers(30, 226, size=(_TEXTURE_CELLS[1], _TEXTURE_CELLS[0], 3), dtype=np.uint8)
    smooth = PILImage.fromarray(cells).resize((width + extra, height), PILImage.Resampling.BICUBIC)
    return np.asarray(smooth, dtype=np.uint8)


def _with_captions(image: Image, captions: Sequence[Caption]) -> Image:
    if not captions:
        return image
    canvas = PILImage.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    width, height = canvas.size
    font = cjk_font(max(14, height // 12))
    pad = height // 40
    for caption in captions:
        where = (width / 2, height * _PLACES[caption.where])
        left, top, right, bottom = draw.textbbox(where, caption.text, font=font, anchor="mm")
        draw.rectangle((left - pad, top - pad, right + pad, bottom + pad), fill=(245, 245, 240))
        draw.text(where, caption.text, font=font, fill=(10, 10, 10), anchor="mm")
    return np.asarray(canvas, dtype=np.uint8)


class _Renderer:
    def __init__(self, shot: Shot, size: Size) -> None:
        self._shot = shot
        self._size = size
        self._texture = _texture(shot, size)

    def frame(self, t: float) -> Image:
        """The shot ``t`` seconds after its own start (negative while it fades in)."""
        width = self._size[0]
        offset = round(max(0.0, t + self._shot.transition_s) * abs(self._shot.pan_px_per_s))
        offset = min(offset, self._texture.shape[1] - width)
        image = self._texture[:, offset : offset + width]
        shot = self._shot
        shown = [caption for caption in shot.captions() if caption.shown_at(t)]
        if shown:
            image = _with_captions(np.ascontiguousarray(image), shown)
        if shot.flash_at_s is not None and abs(t - shot.flash_at_s) < 1e-6:
            image = np.full_like(image, 255)
        return image


def write_edit(
    path: str | Path, shots: Sequence[Shot], *, fps: int = 25, size: Size = (640, 360)
) -> EditTruth:
    """Encode the shots and return the truth about them."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    frames = _frames(shots, fps, size)
    with av.open(str(out), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast", "threads": "1"}
        for pts, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = pts, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return edit_truth(out, shots, fps)


def _frames(shots: Sequence[Shot], fps: int, size: Size) -> list[Image]:
    renderers = [_Renderer(shot, size) for shot in shots]
    frames: list[Image] = []
    for i, (shot, renderer) in enumerate(zip(shots, renderers, strict=True)):
        count = max(1, round(shot.seconds * fps))
        if i > 0 and shot.enter != "cut":
            frames = frames[: len(frames) - _transition_frames(shot, fps)]
            frames.extend(_transition(renderers[i - 1], renderer, shot, fps, shots[i - 1]))
        frames.extend(renderer.frame(n / fps) for n in range(count))
    return frames


def _transition_frames(shot: Shot, fps: int) -> int:
    return max(1, round(shot.transition_s * fps)) // 2


def _transition(
    before: _Renderer, after: _Renderer, shot: Shot, fps: int, previous: Shot
) -> list[Image]:
    """The frames between two shots: the last of one blending into the first of the next
    (a dissolve), or through black (a fade). Half of it replaces the end of the shot before."""
    count = max(1, round(shot.transition_s * fps))
    frames: list[Image] = []
    for n in range(count):
        weight = (n + 1) / (count + 1)
        t_before = previous.seconds - (count // 2) / fps + n / fps
        t_after = (n - count) / fps
        a = before.frame(t_before).astype(np.float32)
        b = after.frame(t_after).astype(np.float32)
        if shot.enter == "dissolve":
            mixed = a * (1 - weight) + b * weight
        else:  # fade: out to black over the first half, in from black over the second
            mixed = a * max(0.0, 1 - 2 * weight) + b * max(0.0, 2 * weight - 1)
        frames.append(np.clip(mixed, 0, 255).astype(np.uint8))
    return frames


def edit_truth(path: str | Path, shots: Sequence[Shot], fps: int = 25) -> EditTruth:
    """The truth ``write_edit`` returns for these shots, without writing them (for an edit
    written before)."""
    boundaries: list[tuple[float, str]] = []
    captions: list[tuple[str, str, float, float]] = []  # (where, text, start, end)
    flashes: list[float] = []
    start = 0.0
    for i, shot in enumerate(shots):
        count = max(1, round(shot.seconds * fps))
        if i > 0:
            if shot.enter == "cut":
                boundaries.append((start, "cut"))
            else:
                # Transition frames replace the end of the shot before and run up to this one.
                half = _transition_frames(shot, fps) / fps
                transition = max(1, round(shot.transition_s * fps)) / fps
                begin = start - half
                boundaries.append((begin + transition / 2, shot.enter))
                start = begin + transition
        end = start + count / fps
        for caption in shot.captions():
            until = end if caption.until_s is None else min(end, start + caption.until_s)
            held = next(
                (
                    n
                    for n, (where, text, _, last) in enumerate(captions)
                    if (where, text) == (caption.where, caption.text) and abs(last - start) < 1e-9
                ),
                None,
            )
            # Shown up to a cut and from it on, in the same place, it never leaves the screen
            # (across a transition it blends out and back: two appearances).
            if held is not None and caption.from_s == 0 and i > 0 and shot.enter == "cut":
                captions[held] = (*captions[held][:3], until)
            else:
                captions.append((caption.where, caption.text, start + caption.from_s, until))
        if shot.flash_at_s is not None:
            flashes.append(start + shot.flash_at_s)
        start = end
    shown = tuple((text, begin, until) for _, text, begin, until in captions)
    return EditTruth(Path(path), start, tuple(boundaries), shown, tuple(flashes))
