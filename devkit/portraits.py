"""A photograph of a face turned to the camera, for the face detector's tests.

scikit-image ships the NASA portrait of the astronaut Eileen Collins (512 x 512; "no known
copyright restrictions, released into the public domain", as its ``skimage.data.astronaut``
says) in every wheel. ``scripts/bootstrap.sh`` fetches it once with ``python -m
devkit.portraits`` into the cache folder; the tests that need it are skipped without it.
"""

from __future__ import annotations

from pathlib import Path

from devkit.pypi_files import PackagedFile

ASTRONAUT = PackagedFile(
    package="scikit-image",
    version="0.26.0",
    packagetype="bdist_wheel",
    member="skimage/data/astronaut.png",
    sha256="88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
    name="skimage-astronaut.png",
)
#: Where the astronaut's face is in the photograph, as (x0, y0, x1, y1), drawn by hand.
ASTRONAUT_FACE = (175, 55, 275, 180)


def astronaut() -> Path | None:
    """The photograph where it was fetched and is whole; None otherwise."""
    return ASTRONAUT.found()


if __name__ == "__main__":
    print(ASTRONAUT.fetch())
