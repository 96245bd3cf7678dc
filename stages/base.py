"""The Stage interface.

A stage is a plain class that declares what it is (``name``, ``kind``, ``reads``, ``fills``,
``resources``, ``fusion``) and how configuration builds it (``build``). Its constructor stores
configuration only; ``setup()`` loads models inside the worker that will run it;
``process_batch(items) -> items`` does the work; ``teardown()`` frees what ``setup()`` took.
The same class runs under the sequential runner (tests, baselines), the streaming service on
Ray, and Ray Data (batch backfill). ``stages.registry`` finds every stage, the service's own and
those other packages install; the docs' "Writing a stage" page shows one.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import ClassVar, Generic, Self, TypeVar

from core.config import ServiceConfig
from core.outputs import VideoOutput
from core.records import Chunk, VideoResult
from models.base import ModelEngine
from stages.errors import StageFailed

log = logging.getLogger(__name__)

InT = TypeVar("InT")
OutT = TypeVar("OutT")
EngineT = TypeVar("EngineT", bound=ModelEngine)


@dataclass(frozen=True)
class Resources:
    """What one replica of a stage needs; fractional CPUs are normal. A stage's pool on Ray
    starts from its stage's declaration; ``PoolSettings`` overrides what it sets."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_mb: int = 0


class Fusion(Enum):
    """Whether a stage may run inside the decode replicas, on each chunk as it is decoded,
    instead of in a pool of its own (``PoolSettings.fuse``); ``core.stage_names.FUSABLE``
    names the stages that may. A stage with GPUs keeps a pool of its own."""

    NEVER = "never"  # not a stage of each chunk (fetching, decoding itself, speech)
    IF_SET = "if_set"  # only where its pool sets ``fuse``
    PER_CORE = "per_core"  # also where the ``per_core`` placement lays out the pools


class StageKind(Enum):
    """What a stage works on, which decides where and how often it runs."""

    INGEST = "ingest"  # fetching and decoding: what makes the frames and audio the rest read
    FRAMES = "frames"  # per chunk of sampled frames (OCR, VLM, image and text embeddings)
    AUDIO = "audio"  # over the audio track, beside the frames (speech)
    VIDEO = "video"  # once per video, on its assembled result: no pixels, nothing decoded


#: The output a frames stage reads to say it reads pixels (filled by the decoder).
PIXELS = "image"


class Stage(ABC, Generic[InT, OutT]):
    """One step of the pipeline, and what the rest of the system needs to know of it.

    ``reads`` and ``fills`` name outputs: a stage's version covers the versions of the stages
    that fill what it reads (``stages.pipeline.Lineage``), and a frames stage's outputs are
    merged, reused and stored by the names it fills (``Frame`` fields, or ``Frame.extras`` for
    names that are not fields).
    """

    name: ClassVar[str]  # one of ``core.stage_names``, or a plug-in's own
    kind: ClassVar[StageKind] = StageKind.FRAMES
    #: The outputs it reads: ``PIXELS``, other stages' ``fills``, ``speech``; () for none.
    reads: ClassVar[tuple[str, ...]] = ()
    #: The outputs it fills (what a later run may take from a result).
    fills: ClassVar[tuple[str, ...]] = ()
    resources: ClassVar[Resources] = Resources()
    fusion: ClassVar[Fusion] = Fusion.NEVER

    @classmethod
    def build(cls, config: ServiceConfig) -> Self | None:
        """The stage as ``config`` sets it up, or None when ``config`` leaves it off. For a
        stage from another package: on when ``stages.plugins`` names it, built from its
        section there (``settings_model`` validates it), and off otherwise."""
        section = config.stages.plugins.get(cls.name)
        if section is None:
            return None
        settings_model = getattr(cls, "settings_model", None)
        if settings_model is None:
            return cls()
        return cls(settings_model.model_validate(section))  # type: ignore[call-arg]

    def version_params(self) -> Mapping[str, object]:
        """Parameters and model ids that change this stage's output; they feed the pipeline
        version, so changing one makes finished videos eligible for recomputation."""
        return {}

    def setup(self) -> None:
        """Load models and open clients; runs once in the worker."""

    @abstractmethod
    def process_batch(self, items: Sequence[InT]) -> list[OutT]:
        """Process items, possibly from several videos at once."""

    def teardown(self) -> None:
        """Release what ``setup()`` took."""


class WithEngine(Generic[EngineT]):
    """A stage around one model engine (``models.base``): ``new_engine()`` makes it from the
    stage's settings, without loading (its ``model_id`` feeds the version); ``setup()`` loads
    it in the worker, ``engine`` is it once loaded, ``teardown()`` closes it. Put before the
    stage's kind among its bases (``class S(WithEngine[E], VideoStage)``)."""

    _engine: EngineT | None = None

    @abstractmethod
    def new_engine(self) -> EngineT:
        """The engine as the settings describe it, not loaded."""

    @property
    def engine(self) -> EngineT:
        if self._engine is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before it processes")
        return self._engine

    def setup(self) -> None:
        engine = self.new_engine()
        engine.load()
        self._engine = engine

    def teardown(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


class EngineStage(WithEngine[EngineT], Stage[Chunk, Chunk]):
    """A frames stage around one model engine (``WithEngine``)."""


class StreamingStage(Stage[InT, OutT]):
    """A stage that turns one input into many outputs while it works (decode -> chunks)."""

    @abstractmethod
    def stream(self, item: InT) -> Iterator[OutT]:
        """Yield outputs as soon as each is ready."""

    def process_batch(self, items: Sequence[InT]) -> list[OutT]:
        return [out for item in items for out in self.stream(item)]


class VideoStage(Stage[VideoResult, VideoOutput]):
    """A stage that runs once per video, on its result as assembled from the other stages'
    outputs (no pixels): chapters, summaries, review labels, fingerprints.

    It never makes a video decode: a video stage added to finished videos runs on their stored
    results. What it gives (``VideoOutput``) is stored in the result document under its name;
    its segments, of the kinds it declares, join the video's segments, and those of the kinds
    in ``searchable`` are found by search. Another video stage may read it by its name.
    """

    kind = StageKind.VIDEO
    resources = Resources(cpus=0.1)
    #: The kinds of the segments it gives, and those of them search finds.
    segment_kinds: ClassVar[tuple[str, ...]] = ()
    searchable: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def analyse(self, result: VideoResult) -> VideoOutput:
        """What the stage finds in one video's result."""

    def process_batch(self, items: Sequence[VideoResult]) -> list[VideoOutput]:
        """Each result's output, checked against what the stage declares (``StageFailed``
        names what it gave that it does not), its segments marked searchable as declared."""
        return [self._declared(self.analyse(result)) for result in items]

    def _declared(self, output: object) -> VideoOutput:
        if not isinstance(output, VideoOutput):
            raise StageFailed(f"gave {type(output).__name__}, not a VideoOutput", stage=self.name)
        for segment in output.segments:
            if segment.kind not in self.segment_kinds:
                raise StageFailed(
                    f"gave a segment of kind {segment.kind!r}, which it does not declare",
                    stage=self.name,
                )
            if not 0 <= segment.start_s <= segment.end_s:
                raise StageFailed(
                    f"gave a segment from {segment.start_s} to {segment.end_s} s", stage=self.name
                )
        try:
            json.dumps(output.to_json(), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StageFailed(f"gave an output that is not JSON: {exc}", stage=self.name) from exc
        segments = tuple(
            replace(segment, searchable=segment.kind in self.searchable)
            for segment in output.segments
        )
        return replace(output, segments=segments)


def process_each(stage: Stage[InT, OutT], items: Sequence[InT]) -> list[OutT | Exception]:
    """The stage on a batch, with an outcome per item: its output, or its own error.

    A stage fails a batch as a whole (a model call covers every item); when it does, the items
    of a batch of several run again one at a time, so that a bad item (a corrupt frame of one
    video) fails alone instead of failing every video batched with it, with its own reason.
    The common case, a batch that succeeds, runs once. For stages with one output per item.
    """
    try:
        return list(stage.process_batch(items))
    except Exception as exc:
        if len(items) == 1:
            return [exc]
        log.warning(
            "%s: a batch of %d failed (%s); running its items one at a time",
            stage.name,
            len(items),
            type(exc).__name__,
        )
    outcomes: list[OutT | Exception] = []
    for item in items:
        try:
            (output,) = stage.process_batch([item])
        except Exception as exc:
            outcomes.append(exc)
        else:
            outcomes.append(output)
    return outcomes
