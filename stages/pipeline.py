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
from typing import Any

from core.config import ServiceConfig
from core.records import TEXT_FIELDS, Chunk, ProbeInfo
from core.stage_names import DECODE, EMBED, FETCH, SPEECH
from stages.base import PIXELS, Stage, StageKind, VideoStage
from stages.decode import DecodeSampleStage
from stages.fetch import FetchProbeStage
from stages.registry import PluginError, installed
from stages.speech import SpeechStage


@dataclass(frozen=True)
class Pipeline:
    """The stages of one pipeline version, not yet set up (constructors store config only),
    in pipeline order: fetch and decode, the frames stages, speech, the video stages."""

    stages: tuple[Stage[Any, Any], ...]

    @classmethod
    def from_config(cls, config: ServiceConfig) -> Pipeline:
        """The stages ``config`` turns on, of every installed one (``stages.registry``)."""
        found = installed()
        unknown = sorted(set(config.stages.plugins) - set(found))
        if unknown:
            raise PluginError(
                f"stages.plugins names {', '.join(unknown)}: no installed package gives "
                "such a stage (entry points reelsense.stages)"
            )
        built = (stage_class.build(config) for stage_class in found.values())
        return cls(_in_reading_order([stage for stage in built if stage is not None]))

    def _named(self, name: str) -> Stage[Any, Any] | None:
        return next((stage for stage in self.stages if stage.name == name), None)

    @property
    def fetch(self) -> FetchProbeStage:
        stage = self._named(FETCH)
        assert isinstance(stage, FetchProbeStage)
        return stage

    @property
    def decode(self) -> DecodeSampleStage:
        stage = self._named(DECODE)
        assert isinstance(stage, DecodeSampleStage)
        return stage

    @property
    def image_stages(self) -> tuple[Stage[Chunk, Chunk], ...]:
        """The frames stages that read pixels: they run side by side on each chunk."""
        return tuple(s for s in self.stages if s.kind is StageKind.FRAMES and s.reads == (PIXELS,))

    @property
    def embed(self) -> Stage[Chunk, Chunk] | None:
        """The frames stage that reads what the others found (their text), after them."""
        return self._named(EMBED)

    @property
    def speech(self) -> SpeechStage | None:
        stage = self._named(SPEECH)
        assert stage is None or isinstance(stage, SpeechStage)
        return stage

    @property
    def video_stages(self) -> tuple[VideoStage, ...]:
        """The stages that run once per video on its assembled result."""
        return tuple(s for s in self.stages if isinstance(s, VideoStage))

    @property
    def searchable_kinds(self) -> tuple[str, ...]:
        """The segment kinds the video stages make searchable."""
        return tuple(kind for stage in self.video_stages for kind in stage.searchable)

    @property
    def version(self) -> str:
        return self.lineage.version

    @cached_property
    def lineage(self) -> Lineage:
        """Stage versions, each from the stage's parameters and the versions of the stages
        that fill what it reads (fetching does not change what is found, so it has none).
        Computed once: the stages' parameters are fixed when the pipeline is built."""
        versions: dict[str, str] = {}
        filled_by: dict[str, str] = {}  # output -> the stage that fills it
        for stage in self.stages:
            outputs = (*stage.fills, stage.name) if stage.kind is StageKind.VIDEO else stage.fills
            if stage.kind is StageKind.INGEST and not outputs:
                continue
            read = sorted({filled_by[name] for name in stage.reads if name in filled_by})
            described: dict[str, Any] = {"params": stage.version_params()}
            if read == [DECODE]:
                described["reads"] = versions[DECODE]  # the pixels
            elif stage.reads:
                described["reads"] = {name: versions[name] for name in read}
            versions[stage.name] = _digest(described)
            for name in outputs:
                filled_by.setdefault(name, stage.name)
        return Lineage(
            versions=versions,
            fills={stage.name: stage.fills for stage in self.image_stages},
            chunk_size=self.decode.chunk_size,
            video_stages=tuple(stage.name for stage in self.video_stages),
        )

    def all_stages(self) -> list[Stage[Any, Any]]:
        """The stages that run on a video's frames and audio (video stages run on its result,
        ``runtime.video_stages``)."""
        return [stage for stage in self.stages if stage.kind is not StageKind.VIDEO]


@dataclass(frozen=True)
class Lineage:
    """What each stage's output depends on, to tell what an earlier result can give."""

    versions: Mapping[str, str]  # stage -> version
    fills: Mapping[str, tuple[str, ...]]  # image stage -> the ``Frame`` fields it fills
    # Samples per chunk for a video, as the decoder cuts them (from its probe; part of the
    # decode version).
    chunk_size: Callable[[ProbeInfo], int]
    video_stages: tuple[str, ...] = ()  # the stages run on a video's assembled result

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

    def video_reusable(self, earlier: Mapping[str, str]) -> frozenset[str]:
        """The video stages whose outputs in a result made with stage versions ``earlier``
        are what they would give now."""
        return frozenset(
            name for name in self.video_stages if earlier.get(name) == self.versions[name]
        )


def _in_reading_order(stages: list[Stage[Any, Any]]) -> tuple[Stage[Any, Any], ...]:
    """``stages`` with each video stage after the video stages it reads (the others keep
    their places: they read only what the stages before them fill). A stage that reads
    something must find at least one of its reads filled by a stage before it: a stage turned
    on without the one it reads stops the pipeline here, with both named."""
    ordered: list[Stage[Any, Any]] = []
    filled: set[str] = set()

    def take(stage: Stage[Any, Any]) -> None:
        if stage.reads and not set(stage.reads) & filled:
            raise PluginError(
                f"stage {stage.name} reads {', '.join(stage.reads)}, which no stage of this "
                "pipeline fills before it: turn on the stage that fills it (stages.plugins)"
            )
        ordered.append(stage)
        filled.update((*stage.fills, stage.name))

    waiting = [stage for stage in stages if stage.kind is StageKind.VIDEO]
    for stage in stages:
        if stage.kind is not StageKind.VIDEO:
            take(stage)
    while waiting:
        ready = next((s for s in waiting if not s.reads or set(s.reads) & filled), waiting[0])
        waiting.remove(ready)
        take(ready)
    return tuple(ordered)


def _text_stages(fills: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
    return frozenset(name for name, fields in fills.items() if set(fields) & set(TEXT_FIELDS))


def _digest(described: Mapping[str, Any]) -> str:
    blob = json.dumps(described, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
