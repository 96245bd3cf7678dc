"""What a stage replica records of its own work: when it was working, on how many items, and
the CPU time of the threads that did the stage's work (its own cost, without the replica's Ray
machinery). ``runtime.metrics.MetricsPoller`` collects the snapshots every few seconds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class ActivitySnapshot:
    """A replica's working time so far, and its intervals after a sequence number."""

    stage: str
    replica: str
    busy_s: float  # wall seconds with at least one call at work
    cpu_s: float  # CPU seconds of the threads that did the work
    calls: int
    items: int
    seq: int  # sequence number of the last interval recorded
    taken_at: float  # time.time() of the snapshot
    intervals: list[tuple[int, float, float, int]] = field(default_factory=list)
    # (seq, start, end, items), times from time.time(), oldest first


@dataclass
class Work:
    """One call being timed; ``items`` may be set before it ends."""

    items: int = 0
    cpu_s: float = 0.0

    async def in_thread(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn`` in a worker thread (as ``asyncio.to_thread``), that thread's CPU time
        counted here: the stage's cost when its library runs in the calling thread (one
        thread, the default); threads a library starts itself are not counted."""

        def timed() -> T:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu_s += time.thread_time() - start  # read only once this call returns

        return await asyncio.to_thread(timed)


class StageActivity:
    """When one replica was working: cumulative busy time and recent intervals.

    Used from the replica's event loop thread only (``working`` wraps the awaited call), so
    it needs no lock. Busy time counts overlapping calls once: it is the time the replica had
    work, which is what a busy fraction compares with wall time.
    """

    def __init__(self, stage: str, replica: str, *, keep: int = 4096) -> None:
        self.stage = stage
        self.replica = replica
        self._intervals: deque[tuple[int, float, float, int]] = deque(maxlen=keep)
        self._active = 0
        self._busy_since = 0.0
        self._busy_s = 0.0
        self._cpu_s = 0.0
        self._calls = 0
        self._items = 0
        self._seq = 0

    @contextlib.contextmanager
    def working(self, items: int = 0) -> Iterator[Work]:
        """Around one call; set ``items`` on what it yields when known only at the end."""
        start_wall, start = time.time(), time.monotonic()
        if self._active == 0:
            self._busy_since = start
        self._active += 1
        work = Work(items)
        try:
            yield work
        finally:
            end = time.monotonic()
            self._active -= 1
            if self._active == 0:
                self._busy_s += end - self._busy_since
            self._calls += 1
            self._items += work.items
            self._cpu_s += work.cpu_s
            self._seq += 1
            self._intervals.append((self._seq, start_wall, start_wall + end - start, work.items))

    def snapshot(self, since: int = 0) -> ActivitySnapshot:
        now = time.monotonic()
        busy = self._busy_s + (now - self._busy_since if self._active else 0.0)
        return ActivitySnapshot(
            stage=self.stage,
            replica=self.replica,
            busy_s=busy,
            cpu_s=self._cpu_s,
            calls=self._calls,
            items=self._items,
            seq=self._seq,
            taken_at=time.time(),
            intervals=[entry for entry in self._intervals if entry[0] > since],
        )


def replica_name(default: str) -> str:
    """The Serve replica's id inside a replica, ``default`` elsewhere."""
    try:
        from ray import serve

        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # not inside a Serve replica (a test, a local executor)
        return default
