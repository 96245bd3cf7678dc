"""One progress subscription per API process, fanned out to its open event streams.

The process holds one subscription to the store's live progress events, whatever the number of
clients; each event stream gets the events its filter passes (its tenant's, or one video's) in a
bounded queue of its own. A client that reads too slowly to keep up is cut off with
``stream_too_slow`` rather than holding the others back. ``max_streams`` bounds the streams
open at once and ``max_streams_per_tenant`` those of one tenant: beyond either, a new stream is
refused with 429 (``too_many_streams``). The subscription is opened by the first stream and
closed with the last; when it fails (the store is unreachable) every open stream ends with the
error and the next stream opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from api.errors import ApiError
from checkpoint.base import CheckpointStore, ProgressEvent
from core.errors import PermanentError
from core.tasks import cancel_and_wait

Item = ProgressEvent | BaseException


class StreamTooSlow(PermanentError):
    """The client read more slowly than its events came: its stream was ended."""

    code = "stream_too_slow"


@dataclass(eq=False)
class _Listener:
    wanted: Callable[[ProgressEvent], bool]
    tenant: str | None
    queue: asyncio.Queue[Item]


class ProgressHub:
    """The live progress events of one store, shared by the event streams of one process."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        max_streams: int = 1000,
        max_streams_per_tenant: int = 100,
        queue_size: int = 1024,
    ) -> None:
        self._store = store
        self._max_streams = max_streams
        self._max_per_tenant = max_streams_per_tenant
        self._queue_size = queue_size
        self._listeners: set[_Listener] = set()
        self._pump: asyncio.Task[None] | None = None

    @property
    def open_streams(self) -> int:
        return len(self._listeners)

    @contextlib.asynccontextmanager
    async def listen(
        self, wanted: Callable[[ProgressEvent], bool], *, tenant: str | None
    ) -> AsyncIterator[asyncio.Queue[Item]]:
        """A queue of the events that pass ``wanted`` from now on, for one stream of
        ``tenant``; an exception in it ends the stream. Call ``admit`` first, before the
        response starts."""
        listener = _Listener(wanted, tenant, asyncio.Queue(maxsize=self._queue_size))
        self._listeners.add(listener)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._run(), name="api-progress-hub")
            await asyncio.sleep(0)  # let it subscribe before the caller reads any state
        try:
            yield listener.queue
        finally:
            self._listeners.discard(listener)
            if not self._listeners and self._pump is not None:
                pump, self._pump = self._pump, None
                await cancel_and_wait(pump)

    def admit(self, tenant: str | None) -> None:
        """Raise ``ApiError`` (429) when the streams open now are as many as this process or
        ``tenant`` may have (None: a caller without a tenant, held to ``max_streams`` only).
        Asked when a request arrives, so two that arrive together may both pass it."""
        if len(self._listeners) >= self._max_streams:
            raise ApiError(
                429, "too_many_streams", f"{self._max_streams} event streams are open already"
            )
        if tenant is not None:
            mine = sum(1 for listener in self._listeners if listener.tenant == tenant)
            if mine >= self._max_per_tenant:
                raise ApiError(
                    429,
                    "too_many_streams",
                    f"tenant {tenant!r} has {mine} event streams open, the most it may",
                )

    async def _run(self) -> None:
        events = self._store.progress()
        try:
            async for event in events:
                for listener in list(self._listeners):
                    if listener.wanted(event):
                        self._offer(listener, event)
        except Exception as exc:
            for listener in list(self._listeners):
                self._end(listener, exc)
        finally:
            closing = getattr(events, "aclose", None)
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing()

    def _offer(self, listener: _Listener, event: ProgressEvent) -> None:
        try:
            listener.queue.put_nowait(event)
        except asyncio.QueueFull:
            self._end(listener, StreamTooSlow(f"more than {self._queue_size} events unread"))

    def _end(self, listener: _Listener, error: BaseException) -> None:
        """Nothing more for ``listener`` but ``error``, which its stream ends with."""
        self._listeners.discard(listener)
        while not listener.queue.empty():
            listener.queue.get_nowait()
        listener.queue.put_nowait(error)
