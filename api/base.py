"""What the progress API reads besides the checkpoint store, each passed in as a function so
the API depends on no concrete index, broker or model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from api.models import DeadLetterEntry, ReplayResult
from core.search import Method, SearchFilter, SegmentHit

SearchFn = Callable[[str, int, SearchFilter, Method], Awaitable[list[SegmentHit]]]
"""(query, k, filter (its tenant None for all), method) -> the best hits, best first. Must not
block the event loop."""
DeadLetterFn = Callable[[str | None, int], Awaitable[Sequence[DeadLetterEntry]]]
"""(tenant or None for all, limit) -> newest dead letters."""
ReplayFn = Callable[[str, str | None], Awaitable[ReplayResult | None]]
"""(dead letter id, tenant or None for all) -> what the replay did; None: no such letter."""
DeleteFn = Callable[[str, str], Awaitable[str]]
"""(video id, its tenant) -> where the deletion event went; the service then removes the video
and everything of it (``runtime.deletion``)."""
