"""Visual detectors over the frames, for the ``review`` video stage.

- ``detect`` (frames): what each detector of ``stages.review.detectors`` finds in each sample
  that keeps its pixels (``models.detectors``: the built-in ``faces``, and those installed
  packages add), stored with the sample as ``[{"detector", "label", "score", "box"}]``,
  ``box`` ``[x0, y0, x1, y1]`` in the frame's pixels; ``[]`` where nothing is found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.config import ReviewSettings, ServiceConfig
from core.records import Chunk
from core.stage_names import DETECT
from models.detectors import DetectorSet, build_detector
from stages.base import PIXELS, EngineStage, Fusion, Resources


class DetectStage(EngineStage[DetectorSet]):
    """Fills ``detect`` for every sample that still has its pixels."""

    name = DETECT
    reads = (PIXELS,)
    fills = (DETECT,)
    # Measured: about 70 CPU ms a 720p sample for ``faces`` on one thread
    # (bench.perf.faces_cost).
    resources = Resources(cpus=0.3)
    fusion = Fusion.PER_CORE

    def __init__(self, settings: ReviewSettings) -> None:
        self._settings = settings

    @classmethod
    def build(cls, config: ServiceConfig) -> DetectStage | None:
        review = config.stages.review
        return cls(review) if review.enabled and review.detectors else None

    def new_engine(self) -> DetectorSet:
        threshold = self._settings.face_threshold
        return DetectorSet(
            [build_detector(name, face_threshold=threshold) for name in self._settings.detectors]
        )

    def version_params(self) -> Mapping[str, object]:
        return {
            "models": self.new_engine().model_id,
            "face_threshold": self._settings.face_threshold,
        }

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        for frame in (f for chunk in items for f in chunk.frames):
            if frame.image is None:
                continue
            frame.extras[DETECT] = [
                {
                    "detector": detector,
                    "label": found.label,
                    "score": round(float(found.score), 4),
                    "box": [round(float(v), 1) for v in found.box],
                }
                for detector, found in self.engine.detect(frame.image)
            ]
        return list(items)
