"""The pipeline: which stages run, built from configuration, and its version.

The pipeline version is a stable hash of the stage list, their parameters and model ids. A video
done under version v is not redone for v; changing any stage's parameters makes a new version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import ServiceConfig
from core.records import Chunk
from stages.base import Stage
from stages.decode import DecodeSampleStage
from stages.embed import EmbedStage
from stages.fetch import FetchProbeStage
from stages.ocr import OcrStage
from stages.vlm import VlmStage


@dataclass(frozen=True)
class Pipeline:
    """The stages of one pipeline version, not yet set up (constructors store config only)."""

    fetch: FetchProbeStage
    decode: DecodeSampleStage
    image_stages: tuple[Stage[Chunk, Chunk], ...]  # read pixels; run side by side per chunk
    embed: Stage[Chunk, Chunk] | None

    @classmethod
    def from_config(cls, config: ServiceConfig) -> Pipeline:
        stages = config.stages
        image: list[Stage[Chunk, Chunk]] = [OcrStage(stages)]
        if stages.vlm_model:
            image.append(VlmStage(stages))
        return cls(
            fetch=FetchProbeStage(config.limits, config.storage, str(Path(config.runtime.workdir))),
            decode=DecodeSampleStage(stages, config.limits),
            image_stages=tuple(image),
            embed=EmbedStage(stages),
        )

    @property
    def version(self) -> str:
        """``v`` + 12 hex digits of a hash over every output-changing parameter."""
        described = [
            {"stage": stage.name, "params": dict(stage.version_params())}
            for stage in self.all_stages()[1:]  # fetching does not change what is found
        ]
        blob = json.dumps(described, sort_keys=True, default=str).encode()
        return "v" + hashlib.sha256(blob).hexdigest()[:12]

    def all_stages(self) -> list[Stage[Any, Any]]:
        return [self.fetch, self.decode, *self.image_stages, *([self.embed] if self.embed else [])]
