"""The Sink interface and what sinks receive.

Every sink is idempotent: writing the same ``VideoResult`` twice leaves the same state as
writing it once (Lance rows keyed by (video_id, frame), object keys derived from the video).
A sink receives many videos at once so that one commit serves them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from core.records import SearchHit, VideoResult


class Sink(ABC):
    """A destination of results."""

    name: ClassVar[str]

    def open(self) -> None:  # noqa: B027 - optional hook
        """Create tables, buckets or folders if missing."""

    @abstractmethod
    def write(self, results: Sequence[VideoResult]) -> None:
        """Write results of several videos; idempotent per video and pipeline version."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""


class VectorIndex(ABC):
    """Nearest-neighbour search over frame text embeddings."""

    @abstractmethod
    def search(
        self, vector: Sequence[float], *, k: int = 10, tenant: str | None = None
    ) -> list[SearchHit]: ...
