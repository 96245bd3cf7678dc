"""The OCR stage: the text written in each frame."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.config import ServiceConfig, StageSettings
from core.records import Chunk
from core.stage_names import OCR
from models.ocr import OcrEngine
from stages.base import PIXELS, EngineStage, Fusion, Resources


class OcrStage(EngineStage[OcrEngine]):
    """Fills ``frame.ocr_lines`` for every frame that still has its pixels."""

    name = OCR
    reads = (PIXELS,)
    fills = ("ocr_lines",)
    # Measured: ~430 MiB peak resident for a process reading 720p frames; no memory is
    # reserved unless a deployment sets ``ray.ocr.memory_mb``. Size ``stages.ocr.threads`` to
    # the CPUs a replica is granted (onnxruntime oversubscribes otherwise).
    resources = Resources(cpus=0.8)
    fusion = Fusion.PER_CORE

    def __init__(self, settings: StageSettings) -> None:
        self._settings = settings

    @classmethod
    def build(cls, config: ServiceConfig) -> OcrStage:
        return cls(config.stages)

    def new_engine(self) -> OcrEngine:
        return OcrEngine(
            det_limit_side=self._settings.ocr.det_limit_side,
            min_score=self._settings.ocr.min_score,
            threads=self._settings.ocr.threads,
        )

    def version_params(self) -> Mapping[str, object]:
        # Threads change speed only, so they are left out.
        return {
            "model": self.new_engine().model_id,
            "det_limit_type": "max",
            "det_limit_side": self._settings.ocr.det_limit_side,
            "min_score": self._settings.ocr.min_score,
        }

    def process_batch(self, items: Sequence[Chunk]) -> list[Chunk]:
        engine = self.engine
        for chunk in items:
            for frame in chunk.frames:
                if frame.image is not None:
                    frame.ocr_lines = engine.read(frame.image)
        return list(items)
