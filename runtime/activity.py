"""What a stage replica records of its own work: when it was working, on how many items, and
the CPU time of the threads that did the stage's work (its own cost, without the replica's Ray
machinery). ``runtime.metrics.MetricsPoller`` collects the snapshots every few seconds."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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


class StageThreads:
    """The threads a replica runs stage work on: one per video at work, kept for the next.

    A video leases a thread for as long as it is decoded, and its decoding and the stages fused
    into it all run there, one call after another, as in a process of its own; a lease given
    back goes to the next video (the thread last used first). ``asyncio.to_thread`` would hand
    each call to whichever thread of the loop's executor wakes first: with every core busy,
    stage work hopping between threads cost 17% more CPU for OCR and 4% for decoding than
    the same calls on one thread (two processes at once on this 2-core host; no difference
    with the other core idle), the buffers a library keeps per thread going cold or being
    rebuilt in each. Used from the replica's event loop only, so it needs no lock.

    Every thread made is kept here until ``close``, leased or not. A lease held by an
    abandoned async generator (a cancelled call's stream, never closed) would otherwise be
    reachable from that generator alone: the garbage collector clears the executor's weak
    references before it runs the generator's finaliser, the executor's worker takes that for
    the executor gone and exits, and the finaliser then gives the lease back, with no thread
    behind it, for a later video's calls to wait on for ever.
    """

    def __init__(self) -> None:
        self._idle: list[ThreadPoolExecutor] = []
        self._made: list[ThreadPoolExecutor] = []

    @contextlib.contextmanager
    def lease(self) -> Iterator[ThreadPoolExecutor]:
        """A thread for one video's calls until the block ends."""
        if self._idle:
            thread = self._idle.pop()
        else:
            thread = ThreadPoolExecutor(1, "stage")
            self._made.append(thread)
        try:
            yield thread
        finally:
            self._idle.append(thread)

    @property
    def leased(self) -> int:
        """Leases out now."""
        return len(self._made) - len(self._idle)

    @contextlib.contextmanager
    def for_video(
        self, listens: bool
    ) -> Iterator[tuple[ThreadPoolExecutor, ThreadPoolExecutor | None]]:
        """A video's leases: one for its decoding and stages, one for its speech recognition
        when it ``listens`` (else None)."""
        with self.lease() as thread:
            if not listens:
                yield thread, None
                return
            with self.lease() as listener:
                yield thread, listener

    def close(self) -> None:
        for thread in self._made:
            thread.shutdown(wait=False)
        self._made.clear()
        self._idle.clear()


async def run_on(
    thread: ThreadPoolExecutor | None, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """``fn`` on ``thread`` (a ``StageThreads`` lease; None: the loop's default executor), the
    caller's context copied as ``asyncio.to_thread`` does."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(thread, call)


@dataclass
class Work:
    """One call being timed; ``items`` may be set before it ends. ``thread``: where
    ``in_thread`` runs (a ``StageThreads`` lease); None: the loop's default executor."""

    items: int = 0
    cpu_s: float = 0.0
    thread: ThreadPoolExecutor | None = None

    async def in_thread(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn`` in a worker thread (as ``asyncio.to_thread``, context included), that
        thread's CPU time counted here: the stage's cost when its library runs in the calling
        thread (one thread, the default); threads a library starts itself are not counted."""

        def timed() -> T:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu_s += time.thread_time() - start  # read only once this call returns

        return await run_on(self.thread, timed)


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
    def working(
        self, items: int = 0, *, thread: ThreadPoolExecutor | None = None
    ) -> Iterator[Work]:
        """Around one call; set ``items`` on what it yields when known only at the end.
        ``thread``: where its ``in_thread`` runs (``Work``)."""
        start_wall, start = time.time(), time.monotonic()
        if self._active == 0:
            self._busy_since = start
        self._active += 1
        work = Work(items, thread=thread)
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
