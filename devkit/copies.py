"""Re-uploaded copies of a video, as a re-poster makes them: re-encoded at a lower bitrate,
scaled, cropped, a logo laid over, sped up, mirrored, or a clip cut from the middle.

``write_copy`` decodes the source once and encodes the copy as it goes (no frame is held
beyond the one shown), with libx264. Copies have no audio track. ``CHANGES`` are the
changes ``bench.duplicates`` and the demo make.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from core.records import Image
from devkit.fonts import cjk_font

_LOGO_WIDTH = 0.16  # of the frame's width
_LOGO_MARGIN = 0.03  # from the top and the right, of the width


@dataclass(frozen=True)
class Change:
    """What a copy does to its source; the default changes nothing but the encoding."""

    name: str
    bitrate_share: float | None = None  # the copy's bitrate as a share of the source's
    height: int | None = None  # scaled to this height, the aspect kept
    crop: float = 0.0  # this share of the width and of the height cut away, centred
    logo: str = ""  # text of a logo laid over the top right corner
    speed: float = 1.0  # played this much faster (0.9: slower)
    mirror: bool = False  # flipped left to right
    clip_s: float | None = None  # only this many seconds from the middle of the source


#: The changes a re-poster makes, by name.
CHANGES: dict[str, Change] = {
    change.name: change
    for change in (
        Change("bitrate_third", bitrate_share=1 / 3),
        Change("scaled_360p", height=360),
        Change("cropped_10pct", crop=0.10),
        Change("logo", logo="REPOST"),
        Change("speed_110pct", speed=1.1),
        Change("mirrored", mirror=True),
        Change("clip_30s", clip_s=30.0),
    )
}


def write_copy(source: str | Path, path: str | Path, change: Change) -> Path:
    """Encode ``source`` changed by ``change`` into ``path`` (its suffix names the
    container), at the source's frame rate."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(source)) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate or 25)
        duration_s = _duration_s(container, stream)
        bitrate = Path(source).stat().st_size * 8 / max(duration_s, 1e-3)
        first_s, seconds = 0.0, duration_s
        if change.clip_s is not None and change.clip_s < duration_s:
            first_s, seconds = (duration_s - change.clip_s) / 2, change.clip_s
        frames = _shown(_decoded(container, stream), fps, first_s, seconds, change.speed)
        _encode(out, frames, fps, change, None if change.bitrate_share is None else bitrate)
    return out


def _duration_s(container: av.container.InputContainer, stream: av.VideoStream) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    return float(container.duration or 0) / av.time_base


def _decoded(
    container: av.container.InputContainer, stream: av.VideoStream
) -> Iterator[tuple[float, Image]]:
    for frame in container.decode(stream):
        if frame.time is not None:
            yield frame.time, np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)


def _shown(
    frames: Iterator[tuple[float, Image]], fps: float, first_s: float, seconds: float, speed: float
) -> Iterator[Image]:
    """The source frame shown at each of the copy's frames: the copy's ``k``-th frame shows
    the source at ``first_s + k * speed / fps``, for ``seconds / speed`` seconds."""
    current: Image | None = None
    upcoming = next(frames, None)
    for k in range(round(seconds / speed * fps)):
        wanted = first_s + k * speed / fps + 1e-6
        while upcoming is not None and upcoming[0] <= wanted:
            current = upcoming[1]
            upcoming = next(frames, None)
        if current is None:
            continue
        yield current


def _encode(
    out: Path, frames: Iterator[Image], fps: float, change: Change, bitrate: float | None
) -> None:
    with av.open(str(out), mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.pix_fmt = "yuv420p"
        if bitrate is None:
            stream.options = {"crf": "23", "preset": "veryfast", "threads": "1"}
        else:
            stream.bit_rate = round(bitrate * (change.bitrate_share or 1.0))
            stream.options = {"preset": "veryfast", "threads": "1"}
        for pts, pixels in enumerate(frames):
            image = changed(pixels, change)
            if pts == 0:
                stream.width, stream.height = image.shape[1], image.shape[0]
            frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
            frame.pts, frame.time_base = pts, Fraction(1, round(fps))
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def changed(pixels: Image, change: Change) -> Image:
    picture = PILImage.fromarray(pixels)
    if change.crop:
        width, height = picture.size
        dx, dy = round(width * change.crop / 2), round(height * change.crop / 2)
        picture = picture.crop((dx, dy, width - dx, height - dy))
    if change.mirror:
        picture = picture.transpose(PILImage.Transpose.FLIP_LEFT_RIGHT)
    if change.height is not None:
        width = round(picture.width * change.height / picture.height / 2) * 2
        picture = picture.resize((width, change.height), PILImage.Resampling.BILINEAR)
    elif change.crop:
        picture = picture.resize(
            (picture.width // 2 * 2, picture.height // 2 * 2), PILImage.Resampling.BILINEAR
        )
    if change.logo:
        _draw_logo(picture, change.logo)
    return np.asarray(picture, dtype=np.uint8)


def _draw_logo(picture: PILImage.Image, text: str) -> None:
    """A white badge with dark text in the top right corner."""
    draw = ImageDraw.Draw(picture)
    width = picture.width
    side = round(width * _LOGO_WIDTH)
    margin = round(width * _LOGO_MARGIN)
    box = (width - margin - side, margin, width - margin, margin + side // 3)
    draw.rounded_rectangle(box, radius=side // 12, fill=(250, 250, 250))
    font = cjk_font(max(10, side // 6))
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    draw.text(centre, text, font=font, fill=(200, 20, 20), anchor="mm")
