"""Videos made of photographs: a slow pan across each, with a hard cut to the next.

What the labels stage is for needs pictures of real things, which generated text cards are not:
Debian's ``darknet`` package ships a few photographs (a dog, an eagle, a giraffe beside a zebra,
horses, a person with a dog) that the tests and the demo make such videos from.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image as PILImage

#: Where Debian's ``darknet`` package puts its sample photographs, installed or only unpacked
#: (``scripts/bootstrap.sh``).
_DARKNET = (Path("/usr/share/darknet/data"), Path("/opt/darknet/usr/share/darknet/data"))
#: The photographs, and the kind of thing the classifier should find in each.
DARKNET_SUBJECTS = {
    "dog": "dog",
    "eagle": "bird",
    "giraffe": "hoofed animal",  # ImageNet has no giraffe: the zebra beside it
    "horses": "hoofed animal",
    "person": "dog",  # ImageNet has no person class to speak of: the dog beside them
}


def darknet_photo(name: str) -> Path:
    """The path of one of darknet's photographs (``dog``, ``eagle``...), wherever it is."""
    for folder in _DARKNET:
        if (folder / f"{name}.jpg").is_file():
            return folder / f"{name}.jpg"
    raise FileNotFoundError(
        f"{name}.jpg of Debian's darknet package is in none of {', '.join(map(str, _DARKNET))}: "
        "run scripts/bootstrap.sh (as root) or apt-get install darknet"
    )


def write_pans(
    path: str | Path,
    photos: Sequence[str | Path],
    *,
    seconds: float = 3.0,
    fps: int = 12,
    size: tuple[int, int] = (640, 360),
) -> Path:
    """A video of ``photos`` one after another, ``seconds`` each: a window of 85% of the
    photo's height (at the video's aspect) moves across it from left to right."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(out), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "veryfast", "threads": "1"}
        stream.codec_context.time_base = Fraction(1, fps)
        pts = 0
        for photo in photos:
            for pixels in _pan(PILImage.open(photo).convert("RGB"), round(seconds * fps), size):
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                frame.pts = pts
                pts += 1
                container.mux(stream.encode(frame.reformat(format="yuv420p")))
        container.mux(stream.encode(None))
    return out


def _pan(photo: PILImage.Image, frames: int, size: tuple[int, int]) -> list[np.ndarray]:
    width, height = photo.size
    crop_h = round(height * 0.85)
    crop_w = min(width, round(crop_h * size[0] / size[1]))
    travel_x, top = width - crop_w, (height - crop_h) // 2
    out = []
    for i in range(frames):
        left = round(travel_x * i / max(frames - 1, 1))
        window = photo.crop((left, top, left + crop_w, top + crop_h))
        out.append(np.asarray(window.resize(size, PILImage.Resampling.BILINEAR)))
    return out


def write_darknet_pans(folder: str | Path, seconds: float = 3.0) -> Path | None:
    """``photos.mp4`` in ``folder``: darknet's photographs in the order of
    ``DARKNET_SUBJECTS``, ``seconds`` each; None where the photographs are not installed."""
    try:
        photos = [darknet_photo(name) for name in DARKNET_SUBJECTS]
    except FileNotFoundError:
        return None
    return write_pans(Path(folder) / "photos.mp4", photos, seconds=seconds)
