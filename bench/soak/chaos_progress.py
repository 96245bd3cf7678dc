"""How far a crash soak has got: the share of all chunks through OCR, and when it is over."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore


class Progress:
    """The share of all chunks the OCR stage got through, never going back (a restarted or
    reset record counts what it had reached before)."""

    def __init__(
        self, store: RedisCheckpointStore, chunks: dict[str, int], check: Callable[[], None]
    ) -> None:
        self.store = store
        self.chunks = chunks
        self.check = check  # restarts a service that exited on its own
        self.best = dict.fromkeys(chunks, 0)
        self.final: set[str] = set()

    def share(self) -> float:
        return sum(self.best.values()) / max(1, sum(self.chunks.values()))

    async def reached(self, share: float, deadline: float) -> bool:
        """Waits until ``share`` of the work is done; False once every video is final (or
        the deadline passed) before that."""
        while time.monotonic() < deadline:
            await self._tick()
            if len(self.final) == len(self.chunks):
                return False
            if self.share() >= share:
                return True
            await asyncio.sleep(0.5)
        return False

    async def settled(self, deadline: float) -> bool:
        """Waits until every video is final; False if the deadline passed first."""
        while time.monotonic() < deadline:
            await self._tick()
            if len(self.final) == len(self.chunks):
                return True
            await asyncio.sleep(0.5)
        return False

    async def _tick(self) -> None:
        await asyncio.to_thread(self.check)
        with contextlib.suppress(Exception):  # Redis may be down for a moment
            await self._poll()

    async def _poll(self) -> None:
        for video_id, total in self.chunks.items():
            status = await self.store.get(video_id)
            if status is None:
                continue
            if status.status in (VideoState.DONE, VideoState.FAILED):
                self.final.add(video_id)
                self.best[video_id] = total
            else:
                self.final.discard(video_id)
                ocr = status.stages.get("ocr")
                done = ocr.done if ocr is not None else 0
                self.best[video_id] = min(total, max(self.best[video_id], done))
