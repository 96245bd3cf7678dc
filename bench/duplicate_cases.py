"""The videos ``bench.duplicates`` looks up: originals, their re-uploaded copies, and
unrelated videos that open alike.

- **Originals** (the library): edits of 5-9 s shots of textures, each its own, panning or
  still, some with a caption; 60 s each (40 s in the quick run), 960 x 540 at 15 fps.
- **Copies** (looked up, each should find its original): every original changed by each of
  ``devkit.copies.CHANGES`` (a third of the bitrate, 360p, a 10% crop, a logo, 10% faster,
  mirrored, a 30 s clip from the middle).
- **Look-alikes**: pairs of unrelated videos that open with the same 4 s title card (one
  picture, a caption on it) or 3 s of black, then show different shots; the first of each
  pair is in the library, the second is looked up and should find nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devkit.copies import CHANGES, write_copy
from devkit.edited_videos import Shot, write_edit

SIZE = (960, 540)
FPS = 15
_TITLE = Shot(4.0, seed=9999, caption="CHANNEL 7 EVENING NEWS", caption_from_s=0.0)
_BLACK = Shot(3.0, flat=(0, 0, 0))


@dataclass(frozen=True)
class Video:
    """One video of the corpus: ``original`` is the library video it copies (None: none)."""

    name: str
    path: Path
    original: str | None = None
    change: str | None = None  # the name of the change a copy makes
    library: bool = False  # whether it is in the library (originals, look-alikes' firsts)


def _shots(rng: np.random.Generator, seconds: float, seed_base: int) -> list[Shot]:
    shots: list[Shot] = []
    total = 0.0
    while total < seconds - 1e-6:
        length = min(float(rng.uniform(5.0, 9.0)), seconds - total)
        caption = f"SCENE {seed_base + len(shots)}" if rng.random() < 0.3 else ""
        shots.append(
            Shot(
                length,
                seed=seed_base + len(shots),
                pan_px_per_s=float(rng.choice([0.0, 15.0, 30.0, 60.0])),
                caption=caption,
                caption_from_s=0.5 if caption else 0.0,
            )
        )
        total += length
    return shots


def write_corpus(folder: Path, quick: bool) -> list[Video]:
    """Writes the corpus into ``folder`` (what is there already is kept) and lists it:
    the library's videos first."""
    originals = 2 if quick else 8
    pairs = 2 if quick else 6
    seconds = 40.0 if quick else 60.0
    library: list[Video] = []
    queries: list[Video] = []
    for i in range(originals):
        name = f"original-{i:02d}"
        shots = _shots(np.random.default_rng(i), seconds, seed_base=1000 * (i + 1))
        path = _edit(folder / f"{name}.mp4", shots)
        library.append(Video(name, path, library=True))
        for change in CHANGES.values():
            copy = folder / f"{name}-{change.name}.mp4"
            if not copy.exists():
                write_copy(path, copy, change)
            queries.append(Video(copy.stem, copy, original=name, change=change.name))
    for k in range(pairs):
        intro = _TITLE if k % 2 == 0 else _BLACK
        for side in ("a", "b"):
            seed = 500_000 + 1000 * k + (0 if side == "a" else 500)
            body = _shots(np.random.default_rng(seed), 24.0, seed_base=seed)
            name = f"lookalike-{k:02d}{side}"
            path = _edit(folder / f"{name}.mp4", [intro, *body])
            video = Video(name, path, library=side == "a")
            (library if side == "a" else queries).append(video)
    return [*library, *queries]


def _edit(path: Path, shots: Sequence[Shot]) -> Path:
    if not path.exists():
        write_edit(path, shots, fps=FPS, size=SIZE)
    return path
