"""The Stage interface.

A stage is a plain class. Its constructor stores configuration only; ``setup()`` loads models
inside the worker that will run it; ``process_batch(items) -> items`` does the work;
``teardown()`` frees what ``setup()`` took. The same class runs under the sequential runner
(tests, baselines), the streaming service on Ray, and Ray Data (batch backfill).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Generic, TypeVar

log = logging.getLogger(__name__)

InT = TypeVar("InT")
OutT = TypeVar("OutT")


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


class Stage(ABC, Generic[InT, OutT]):
    """One step of the pipeline."""

    name: ClassVar[str]  # one of ``core.stage_names``
    #: The ``Frame`` fields an image stage fills (what a later run may take from a result).
    fills: ClassVar[tuple[str, ...]] = ()
    resources: ClassVar[Resources] = Resources()
    fusion: ClassVar[Fusion] = Fusion.NEVER

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


class StreamingStage(Stage[InT, OutT]):
    """A stage that turns one input into many outputs while it works (decode -> chunks)."""

    @abstractmethod
    def stream(self, item: InT) -> Iterator[OutT]:
        """Yield outputs as soon as each is ready."""

    def process_batch(self, items: Sequence[InT]) -> list[OutT]:
        return [out for item in items for out in self.stream(item)]


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
