"""How the per-video orchestration reaches the stages.

``StageExecutor`` is what ``VideoProcessor`` talks to. Two implementations run the same stage
classes: ``LocalExecutor`` (in this process, threads; unit tests and baselines) and
``service.ray_pools.RayExecutor`` (Ray Serve stage pools; the service).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from core.records import Chunk, LocalVideo, VideoRef
from sinks.base import EarlierResult, VideoResult
from stages.decode import ResumePoint


@dataclass(frozen=True)
class ChunkTicket:
    """A decoded chunk waiting for the image stages. ``payload`` is where its pixels are: the
    chunk itself in-process, or an object-store reference on Ray, so pixels travel from the
    decoder to the image stages without passing through the orchestrating process."""

    video_id: str
    index: int
    frames: int
    last: bool
    payload: Any
    stream: str = ""  # the ingest stream it came from, where the executor needs to know


IngestItem = LocalVideo | ChunkTicket


class StageExecutor(ABC):
    """Runs the stages for the orchestrator."""

    #: Stages that read pixels, run side by side on each chunk (e.g. ("ocr", "vlm")).
    image_stages: tuple[str, ...]
    #: Whether an embedding stage runs after the image stages.
    embeds: bool

    @abstractmethod
    def ingest(self, ref: VideoRef, resume: ResumePoint | None = None) -> AsyncIterator[IngestItem]:
        """Fetch and probe the video (yield its ``LocalVideo`` first), then decode and sample it
        (from ``resume`` on), yielding a ticket per chunk as soon as the chunk is ready."""

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
