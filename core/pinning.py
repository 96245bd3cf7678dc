"""Connections only to the addresses ``core.netguard`` checked, each wait cut to a deadline.

``pinned(target)`` says, for the requests sent inside it, which addresses a host may be reached
at; the network backends of ``PinnedTransport`` and ``AsyncPinnedTransport`` connect to those
only and refuse a host nobody checked, never resolving a name themselves. Inside
``deadline(at)`` every socket wait of ``PinnedTransport`` (connect, TLS, each read and write)
is cut to the time left.
"""

from __future__ import annotations

import ipaddress
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Route = Callable[[IPAddress, int], tuple[str, int]]
"""Where a checked (address, port) is reached; tests send stub public addresses to 127.0.0.1."""


@dataclass(frozen=True)
class Target:
    """A checked URL: the name httpx will connect by, and the only addresses it may reach."""

    url: str
    host: str  # ASCII (IDNA) form, as httpx and httpcore see it
    port: int
    addresses: tuple[IPAddress, ...]  # never empty; all checked


# The target checked for the request in progress. httpcore connects inside the task (or
# thread) that sends the request, so the backend reads the pin that request's caller set.
_PIN: ContextVar[Target | None] = ContextVar("reelsense_netguard_pin", default=None)


@contextmanager
def pinned(target: Target) -> Iterator[Target]:
    """Requests sent inside this block may connect to ``target``'s checked addresses only."""
    token = _PIN.set(target)
    try:
        yield target
    finally:
        _PIN.reset(token)


# When the request in progress must be over (time.monotonic()), read by the transport at each
# socket wait: the sync transport waits in the thread that sends the request.
_DEADLINE: ContextVar[float | None] = ContextVar("reelsense_netguard_deadline", default=None)


@contextmanager
def deadline(at: float) -> Iterator[None]:
    """Requests sent inside this block through ``PinnedTransport`` end by ``at`` (a
    ``time.monotonic()`` instant), whatever the pace of the peer: a wait that would pass it
    raises httpx's ``TimeoutException`` instead."""
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _time_left(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    """``timeout`` cut to what is left before the deadline; ``expired`` once it has passed."""
    at = _DEADLINE.get()
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise expired("the deadline for this request has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every wait ends by the deadline in force when it waits."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


def direct(address: IPAddress, port: int) -> tuple[str, int]:
    """The production route: the checked address itself."""
    return str(address), port


def _dial_plan(host: str, port: int, route: Route) -> list[tuple[str, int]]:
    target = _PIN.get()
    if target is None or (target.host, target.port) != (host, port):
        # A request outside ``pinned`` or a host nobody checked: refuse, never resolve.
        raise httpcore.ConnectError(f"{host}:{port} was not checked by the network guard")
    return [route(address, port) for address in target.addresses]


_CONNECT_ERRORS = (httpcore.ConnectError, httpcore.ConnectTimeout)


class _PinnedBackend(httpcore.NetworkBackend):
    def __init__(self, route: Route) -> None:
        self._route = route
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        *others, last = _dial_plan(host, port, self._route)
        for address, real_port in others:  # each checked address in turn, the last one raises
            with suppress(*_CONNECT_ERRORS):
                return self._connect((address, real_port), timeout, local_address, socket_options)
        return self._connect(last, timeout, local_address, socket_options)

    def _connect(
        self,
        where: tuple[str, int],
        timeout: float | None,
        local_address: str | None,
        socket_options: Iterable[Any] | None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        stream = self._sockets.connect_tcp(*where, left, local_address, socket_options)
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


class _AsyncPinnedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, route: Route) -> None:
        self._route = route
        self._sockets = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        *others, last = _dial_plan(host, port, self._route)
        for address, real_port in others:
            with suppress(*_CONNECT_ERRORS):
                return await self._sockets.connect_tcp(
                    address, real_port, timeout, local_address, socket_options
                )
        return await self._sockets.connect_tcp(*last, timeout, local_address, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._sockets.sleep(seconds)


class PinnedTransport(httpx.HTTPTransport):
    """An httpx transport that connects only to the addresses ``pinned`` for the request.

    ``verify`` and ``route`` are for tests: a test CA, a stub public address reached on
    127.0.0.1.
    """

    def __init__(self, *, verify: ssl.SSLContext | bool = True, route: Route = direct) -> None:
        super().__init__(trust_env=False)
        # httpx takes no network backend: its pool is replaced by one built around ours.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            network_backend=_PinnedBackend(route),
        )


class AsyncPinnedTransport(httpx.AsyncHTTPTransport):
    """The asyncio form of :class:`PinnedTransport`, with a bounded connection pool."""

    def __init__(self, *, max_connections: int = 100) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=max_connections,
            keepalive_expiry=5.0,  # httpx's default: idle connections are not kept for ever
            network_backend=_AsyncPinnedBackend(direct),
        )
