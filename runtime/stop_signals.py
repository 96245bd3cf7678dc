"""SIGTERM and SIGINT as a request to stop, from the first moment of a command that runs the
service to its last.

A supervisor stops a process whenever it likes: during the embedded stack's start, during
``ray.init``, while the stage pools deploy, or with every process of the group at once
(``kill -- -PGID``, a control-group stop). Python's defaults would end the process where the
signal lands (SIGTERM at once, SIGINT as a ``KeyboardInterrupt`` anywhere), leaving what it
started behind. Here a signal only records the request; the command looks at it between its
steps and the running service is told through its loop, so every stop takes the same way out:
drain, commit, stop what was started, exit 0. A second SIGINT still interrupts (an impatient
Ctrl-C).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Self

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_Handler = Callable[[int, FrameType | None], object] | int | None


class StopSignals:
    """While entered, SIGTERM and SIGINT set ``requested`` and call what ``on_request`` gave."""

    def __init__(self) -> None:
        self.requested = False
        self._callbacks: list[Callable[[], None]] = []
        self._previous: dict[int, _Handler] = {}

    def __enter__(self) -> Self:
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        for callback in list(self._callbacks):
            callback()

    @contextlib.contextmanager
    def on_request(self, callback: Callable[[], None]) -> Iterator[None]:
        """Call ``callback`` on a request while inside (at once if one came already)."""
        self._callbacks.append(callback)
        try:
            if self.requested:
                callback()
            yield
        finally:
            self._callbacks.remove(callback)

    @contextlib.contextmanager
    def in_loop(self, stop: Callable[[], None]) -> Iterator[None]:
        """``on_request`` for a callback of the running loop: a signal handler runs between
        any two bytecodes of the main thread, the loop's own included, so the call is
        scheduled on the loop rather than made in the handler."""
        loop = asyncio.get_running_loop()

        def schedule() -> None:
            loop.call_soon_threadsafe(stop)

        with self.on_request(schedule):
            yield
