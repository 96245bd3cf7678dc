"""How the per-video orchestration reaches the stages.

``StageExecutor`` is what ``VideoProcessor`` talks to. Two implementations run the same stage
classes: ``LocalExecutor`` (in this process, threads; unit tests and baselines) and
``runtime.ray_pools.RayExecutor`` (Ray Serve stage pools; the service).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from core.records import Chunk, EarlierResult, Frame, LocalVideo, VideoRef, VideoResult
from stages.decode import ResumePoint


@dataclass(frozen=True)
class ChunkTicket:
    """A decoded chunk waiting for the image stages. ``payload`` is where its pixels are: the
    chunk itself in-process, or an object-store reference on Ray, so pixels travel from the
    decoder to the image stages without passing through the orchestrating process.

    Stages run inside the decoder (``StageExecutor.inline``) are named in ``applied``;
    ``analysed`` is then the chunk with their outputs (no pixels) and ``seconds`` what each
    took. ``payload`` is None when no image stage is left to read the pixels."""

    video_id: str
    index: int
    frames: int
    last: bool
    payload: Any
    stream: str = ""  # the ingest stream it came from, where the executor needs to know
    applied: frozenset[str] = frozenset()
    analysed: Chunk | None = None
    seconds: Mapping[str, float] = field(default_factory=dict)


IngestItem = LocalVideo | ChunkTicket


def merge_outputs(outputs: list[Chunk]) -> Chunk:
    """Combine what the image stages found in the same chunk, frame by frame."""
    base = outputs[0]
    frames: list[Frame] = []
    for position, frame in enumerate(base.frames):
        merged = replace(frame, image=None)
        for other in outputs[1:]:
            found = other.frames[position]
            merged.ocr_lines = merged.ocr_lines or found.ocr_lines
            merged.caption = merged.caption or found.caption
        frames.append(merged)
    return replace(base, frames=frames)


class StageExecutor(ABC):
    """Runs the stages for the orchestrator."""

    #: Stages that read pixels, run side by side on each chunk (e.g. ("ocr", "vlm")).
    image_stages: tuple[str, ...]
    #: Whether an embedding stage runs after the image stages.
    embeds: bool
    #: Stages the executor can run inside the decoder, on each chunk as it is decoded.
    inline: frozenset[str] = frozenset()

    @abstractmethod
    def ingest(
        self, ref: VideoRef, resume: ResumePoint | None = None, inline: Collection[str] = ()
    ) -> AsyncIterator[IngestItem]:
        """Fetch and probe the video (yield its ``LocalVideo`` first), then decode and sample it
        (from ``resume`` on), yielding a ticket per chunk as soon as the chunk is ready; the
        stages of ``inline`` (a subset of ``self.inline``, the embedder only with every image
        stage) run on each chunk before its ticket is yielded."""

    @abstractmethod
    async def analyse(self, stage: str, ticket: ChunkTicket) -> Chunk:
        """Run one image stage on a chunk; the returned chunk carries no pixels."""

    def release(self, ticket: ChunkTicket) -> None:  # noqa: B027 - optional hook
        """The image stages are done with the ticket's pixels (whatever their outcome)."""

    @abstractmethod
    async def embed(self, chunk: Chunk) -> Chunk:
        """Embed the text of a chunk's frames."""

    @abstractmethod
    async def write(self, result: VideoResult) -> None:
        """Write a video's results to every sink (batched with other videos); raises
        ``StaleEpoch`` when a newer attempt owns the video."""

    @abstractmethod
    async def earlier(self, video_id: str) -> EarlierResult | None:
        """What the sinks hold of the video's latest result, if anything."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the executor holds."""
