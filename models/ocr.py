"""OCR with RapidOCR 3.x on onnxruntime (Chinese + English, models shipped in the wheel)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from rapidocr import EngineType, LangDet, LangRec, ModelType, OCRVersion

from core.records import Image, OcrLine
from models.base import OcrModel, package_version, require_rgb
from models.errors import InferenceFailed, ModelLoadError

log = logging.getLogger(__name__)

# Pinned rather than left to RapidOCR's defaults, so that upgrading the library cannot change the
# models (and so the output) without ``model_id`` changing with it. PP-OCRv6 "ch" reads Chinese
# and English; the direction classifier turns upside-down lines back before recognition.
_OCR_VERSION = "PP-OCRv6"
_MODEL_TYPE = "small"
_LANG = "ch"


class OcrEngine(OcrModel):
    """Reads text lines from RGB frames.

    ``det_limit_side`` caps the long side the detector sees (the frame is scaled down to it,
    boxes are mapped back to frame pixels); it is the main cost/recall knob. ``threads`` sizes
    onnxruntime's intra-op pool to the CPUs the replica is granted: the default pool takes every
    core of the machine and oversubscribes it when several replicas share a node.
    """

    def __init__(
        self, *, det_limit_side: int = 640, min_score: float = 0.5, threads: int = 1
    ) -> None:
        self.det_limit_side = det_limit_side
        self.min_score = min_score
        self.threads = threads
        self._ocr: Any = None

    @property
    def model_id(self) -> str:
        return f"rapidocr-{package_version('rapidocr')}:{_OCR_VERSION}-{_MODEL_TYPE}-{_LANG}"

    def _params(self) -> dict[str, Any]:
        version, model_type = OCRVersion(_OCR_VERSION), ModelType(_MODEL_TYPE)
        return {
            # "error": RapidOCR warns on every frame without text otherwise.
            "Global.log_level": "error",
            "Global.text_score": self.min_score,
            "Det.engine_type": EngineType.ONNXRUNTIME,
            "Det.ocr_version": version,
            "Det.model_type": model_type,
            "Det.lang_type": LangDet(_LANG),
            "Det.limit_type": "max",
            "Det.limit_side_len": self.det_limit_side,
            "Rec.engine_type": EngineType.ONNXRUNTIME,
            "Rec.ocr_version": version,
            "Rec.model_type": model_type,
            "Rec.lang_type": LangRec(_LANG),
            "EngineConfig.onnxruntime.intra_op_num_threads": self.threads,
            # The three models run one after another, never in parallel graphs.
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
        }

    def load(self) -> None:
        try:
            # Imported here: it pulls in OpenCV and onnxruntime, which only OCR workers need.
            from rapidocr import RapidOCR

            ocr = RapidOCR(params=self._params())
            # RapidOCR creates its onnxruntime sessions on first use; create all three now so
            # that load time is paid here and not by the first frame that has text.
            for loader in ("_load_det_model", "_load_cls_model", "_load_rec_model"):
                if hasattr(ocr, loader):
                    getattr(ocr, loader)()
        except ImportError as exc:
            raise ModelLoadError(f"rapidocr/onnxruntime not importable: {exc}") from exc
        except Exception as exc:
            raise ModelLoadError(f"cannot load RapidOCR models: {exc}") from exc
        self._ocr = ocr

    def read(self, image: Image) -> list[OcrLine]:
        if self._ocr is None:
            raise RuntimeError("OcrEngine.load() must run before read()")
        rgb = require_rgb(image)
        # RapidOCR takes numpy input as OpenCV BGR; frames here are RGB.
        bgr = np.ascontiguousarray(rgb[..., ::-1])
        try:
            result = self._ocr(bgr)
        except Exception as exc:
            raise InferenceFailed(f"OCR failed on a {rgb.shape} frame: {exc}") from exc
        boxes, texts, scores = result.boxes, result.txts, result.scores
        if boxes is None or texts is None or scores is None:
            return []
        lines: list[OcrLine] = []
        for box, text, score in zip(boxes, texts, scores, strict=True):
            if score < self.min_score or not text.strip():
                continue
            corners = tuple((float(x), float(y)) for x, y in np.asarray(box).reshape(-1, 2))
            lines.append(OcrLine(text=str(text), score=float(score), box=corners))
        return lines

    def close(self) -> None:
        self._ocr = None
