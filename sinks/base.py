"""The Sink interface and what sinks receive.

Every sink is idempotent: writing the same ``VideoResult`` twice leaves the same state as
writing it once (Lance rows keyed by (video_id, frame), object keys derived from the video).
A sink receives many videos at once so that one commit serves them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from core.records import VideoRef, VideoResult


class Sink(ABC):
    """A destination of results."""

    name: ClassVar[str]

    def open(self) -> None:  # noqa: B027 - optional hook
        """Create tables, buckets or folders if missing."""

    @abstractmethod
    def write(self, results: Sequence[VideoResult]) -> None:
        """Write results of several videos; idempotent per video and pipeline version."""

    @abstractmethod
    def forget(self, videos: Sequence[VideoRef]) -> None:
        """Remove everything this sink holds of ``videos`` (deleted videos), for good: gone
        from disk too within ``storage.deletion_max_s`` (``purge``)."""

    def purge_in(self) -> float | None:
        """Seconds until this sink's next step of purging what it forgot (0: due now), None
        when none is scheduled."""
        return None

    def purge(self) -> float | None:
        """Run the purge step that is due (``sinks.lance_purge``); as ``purge_in`` after."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""
