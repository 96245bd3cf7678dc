"""A perceptual hash of each sample, for the ``duplicates`` video stage.

- ``fingerprint`` (frames): ``models.frame_hash`` of each sample that keeps its pixels,
  stored with the sample as ``{"hash", "mirror", "weak", "mirror_weak", "flat"}`` (hex
  strings of 64 bits). The sinks keep one a second of them in table ``fingerprints``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.config import DuplicateSettings, ServiceConfig
from core.records import Chunk
from core.stage_names import FINGERPRINT
from models.frame_hash import CENTRE, REVISION, frame_hash
from stages.base import PIXELS, Fusion, Resources, Stage


class FingerprintStage(Stage[Chunk, Chunk]):
    """Fills ``fingerprint`` for every sample that still has its pixels."""

    name = FINGERPRINT
    reads = (PIXELS,)
    fills = (FINGERPRINT,)
    # Measured: 1.1 CPU ms a 720p sample (a grey 32 x 32 and a small transform).
    resources = Resources(cpus=0.02)
    fusion = Fusion.PER_CORE

    def __init__(self, settings: DuplicateSettings) -> None:
        self._settings = settings

    @classmethod
    def build(cls, config: ServiceConfig) -> FingerprintStage | None:
        duplicates = config.stages.duplicates
        return cls(duplicates) if duplicates.enabled else None

    def version_params(self) -> Mapping[str, object]:
        return {"hash": REVISION, "centre": CENTRE}

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        for frame in (f for chunk in items for f in chunk.frames):
            if frame.image is not None:
                frame.extras[FINGERPRINT] = frame_hash(frame.image).to_json()
        return list(items)
