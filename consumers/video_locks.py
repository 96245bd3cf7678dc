"""One lock per video id, so records of the same video run one after another."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class _VideoLock:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class VideoLocks:
    """Locks held per video id, kept only while someone holds or waits for them (a consumer
    sees millions of ids over its life)."""

    def __init__(self) -> None:
        self._locks: dict[str, _VideoLock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, video_id: str | None) -> AsyncIterator[None]:
        """Records of the same video run one after another (FIFO), never at once; a record
        without a readable id takes no lock."""
        if video_id is None:
            yield
            return
        entry = self._locks.setdefault(video_id, _VideoLock())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[video_id]
