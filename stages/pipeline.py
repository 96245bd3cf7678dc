"""The pipeline: which stages run, built from configuration, and its versions.

Every stage has a version: a stable hash of its own parameters and model ids and of the
versions of the stages it reads from (decode <- each image stage; the image stages that give
text <- embed). The pipeline version is a hash of them all. A video done under version v is not
redone for v; changing one stage's parameters changes the versions of that stage and of those
after it that read its output, so a video re-processed under the new pipeline version
recomputes only those stages and takes the outputs of the others from its earlier result (see
``Lineage``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from core.config import ServiceConfig
from core.records import TEXT_FIELDS, Chunk, ProbeInfo
from core.stage_names import EMBED, SPEECH
from stages.base import Stage
from stages.decode import DecodeSampleStage
from stages.embed import EmbedStage
from stages.fetch import FetchProbeStage
from stages.image_embed import ImageEmbedStage
from stages.ocr import OcrStage
from stages.speech import SpeechStage
from stages.vlm import VlmStage


@dataclass(frozen=True)
class Pipeline:
    """The stages of one pipeline version, not yet set up (constructors store config only)."""

    fetch: FetchProbeStage
    decode: DecodeSampleStage
    image_stages: tuple[Stage[Chunk, Chunk], ...]  # read pixels; run side by side per chunk
    embed: Stage[Chunk, Chunk] | None
    speech: SpeechStage | None = None  # the audio track, beside the frames

    @classmethod
    def from_config(cls, config: ServiceConfig) -> Pipeline:
        stages = config.stages
        image: list[Stage[Chunk, Chunk]] = [OcrStage(stages)]
        if stages.vlm_model:
            image.append(VlmStage(stages))
        if stages.image_embed_model:
            image.append(ImageEmbedStage(stages))
        return cls(
            fetch=FetchProbeStage(config.limits, config.storage, str(Path(config.runtime.workdir))),
            decode=DecodeSampleStage(stages, config.limits),
            image_stages=tuple(image),
            embed=EmbedStage(stages),
            speech=SpeechStage(config.asr, config.limits) if config.asr.enabled else None,
        )

    @property
    def version(self) -> str:
        return self.lineage.version

    @cached_property
    def lineage(self) -> Lineage:
        """Stage versions (fetching does not change what is found, so it has none; speech
        reads the audio, not the decoded frames). Computed once: the stages' parameters are
        fixed when the pipeline is built."""
        decode = _digest({"params": self.decode.version_params()})
        versions = {self.decode.name: decode}
        for stage in self.image_stages:
            versions[stage.name] = _digest({"params": stage.version_params(), "reads": decode})
        fills = {stage.name: stage.fills for stage in self.image_stages}
        if self.embed is not None:
            reads = {name: versions[name] for name in _text_stages(fills)}
            versions[self.embed.name] = _digest(
                {"params": self.embed.version_params(), "reads": reads}
            )
        if self.speech is not None:
            versions[self.speech.name] = _digest({"params": self.speech.version_params()})
        return Lineage(
            versions=versions,
            fills=fills,
            chunk_size=self.decode.chunk_size,
        )

    def all_stages(self) -> list[Stage[Any, Any]]:
        optional = [stage for stage in (self.embed, self.speech) if stage is not None]
        return [self.fetch, self.decode, *self.image_stages, *optional]


@dataclass(frozen=True)
class Lineage:
    """What each stage's output depends on, to tell what an earlier result can give."""

    versions: Mapping[str, str]  # stage -> version
    fills: Mapping[str, tuple[str, ...]]  # image stage -> the ``Frame`` fields it fills
    # Samples per chunk for a video, as the decoder cuts them (from its probe; part of the
    # decode version).
    chunk_size: Callable[[ProbeInfo], int]

    @property
    def version(self) -> str:
        """The pipeline version: ``v`` + 12 hex digits of a hash over every stage version."""
        return "v" + _digest(self.versions)

    @property
    def analysed_fields(self) -> tuple[str, ...]:
        """Every ``Frame`` field the image stages fill: what a repeated sample takes from the
        sample it repeats."""
        return tuple(field for fields in self.fills.values() for field in fields)

    def reusable(self, earlier: Mapping[str, str]) -> frozenset[str]:
        """Image stages whose outputs in a result made with stage versions ``earlier`` are
        what they would compute now. Nothing is, unless the same frames were sampled."""
        decode = DecodeSampleStage.name
        if not earlier or earlier.get(decode) != self.versions[decode]:
            return frozenset()
        return frozenset(
            name for name in self.fills if earlier.get(name) == self.versions.get(name)
        )

    @property
    def text_stages(self) -> frozenset[str]:
        """The image stages whose outputs make a frame's text: what the embedder reads."""
        return _text_stages(self.fills)

    def embeddings_reusable(self, earlier: Mapping[str, str]) -> bool:
        """Whether the embeddings of a result made with stage versions ``earlier`` are what
        the embedder would compute now (its version covers the text it reads)."""
        return EMBED in self.versions and earlier.get(EMBED) == self.versions[EMBED]

    @property
    def speech(self) -> bool:
        """Whether speech is recognised."""
        return SPEECH in self.versions

    def speech_reusable(self, earlier: Mapping[str, str]) -> bool:
        """Whether the speech of a result made with stage versions ``earlier`` is what
        recognition would give now."""
        return self.speech and earlier.get(SPEECH) == self.versions[SPEECH]


def _text_stages(fills: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
    return frozenset(name for name, fields in fills.items() if set(fields) & set(TEXT_FIELDS))


def _digest(described: Mapping[str, Any]) -> str:
    blob = json.dumps(described, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
