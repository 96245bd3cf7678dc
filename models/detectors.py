"""Every visual detector the service can run: the built-in ``faces``, and those other
installed packages add.

A package adds a detector through the entry-point group ``reelsense.detectors``: each entry
names a class or function (``my_package.detectors:Nudity``) that, called with no arguments,
gives a ``models.base.VisualDetector`` (configuration only: ``load()`` reads the weights
later, in the worker). The configuration turns it on by its name
(``stages.review.detectors``), and says which of its labels are review findings
(``stages.review.visual_labels``). A detector is checked when it is built, so a mistake in a
plug-in stops the service at start, never half-way through a video.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from importlib.metadata import entry_points

from core.records import Image
from models.base import Detection, ModelEngine, VisualDetector
from models.errors import ModelLoadError
from models.faces import FaceDetector

GROUP = "reelsense.detectors"
FACES = FaceDetector.name

DetectorFactory = Callable[[], VisualDetector]

_NAME = re.compile(r"[a-z][a-z0-9_]{1,39}")


class DetectorError(ModelLoadError):
    """An installed detector that cannot run: what is wrong with it, and which entry named
    it; or a detector configured that none installed has the name of."""


@cache
def installed_detectors() -> dict[str, DetectorFactory]:
    """Every detector's factory by name: ``faces``, then each installed package's in the
    order of their names. Read once per process (``installed_detectors.cache_clear()`` after
    installing one at run time)."""
    found: dict[str, DetectorFactory] = {FACES: FaceDetector}
    for entry in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
        where = f"entry point {entry.name} = {entry.value} ({GROUP})"
        if not _NAME.fullmatch(entry.name) or entry.name in found:
            raise DetectorError(f"{where}: the name is taken or not 2-40 characters of [a-z0-9_]")
        try:
            found[entry.name] = entry.load()
        except Exception as exc:
            raise DetectorError(f"{where}: cannot be imported: {exc}") from exc
    return found


def build_detector(name: str, *, face_threshold: float = 0.5) -> VisualDetector:
    """The detector ``name``, not loaded; ``faces`` keeps faces from ``face_threshold``."""
    if name == FACES:
        return FaceDetector(threshold=face_threshold)
    factories = installed_detectors()
    if name not in factories:
        known = ", ".join(sorted(factories))
        raise DetectorError(f"no visual detector is named {name!r} (installed: {known})")
    detector = factories[name]()
    if not isinstance(detector, VisualDetector) or detector.name != name:
        raise DetectorError(
            f"the {GROUP} entry {name!r} gave {type(detector).__name__}, not a VisualDetector "
            f"named {name!r}"
        )
    return detector


class DetectorSet(ModelEngine):
    """Several detectors as one engine: loaded and closed together, each frame given to each."""

    def __init__(self, detectors: Sequence[VisualDetector]) -> None:
        self.detectors = tuple(detectors)

    @property
    def model_id(self) -> str:
        return ",".join(f"{d.name}={d.model_id}" for d in self.detectors)

    def load(self) -> None:
        for detector in self.detectors:
            detector.load()

    def detect(self, image: Image) -> list[tuple[str, Detection]]:
        """What each detector finds in an RGB image, with the detector's name."""
        return [(d.name, found) for d in self.detectors for found in d.detect(image)]

    def close(self) -> None:
        for detector in self.detectors:
            detector.close()
