"""The outbound-network guard: its range table, URL checks, pinned connections, redirects.

Every test runs under a guard that fails it on any connection to a non-loopback address and
records every connection, so a refusal is proven to happen before any socket connects. A local
http.server on 127.0.0.1 answers with the Host header it was sent; "public" names resolve (by a
stub resolver) to public addresses that the transport's test route reaches on that server.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from core import netguard, pinning
from core.netguard import OutboundRefused, OutboundUnresolvable, TooManyRedirects

PUBLIC_IP = "93.184.216.34"
CDN_IP = "151.101.1.69"


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every address a socket connected to (sync and asyncio); non-loopback fails the test."""
    seen: list[str] = []

    def check(host: Any) -> None:
        seen.append(str(host))
        try:
            address = ipaddress.ip_address(str(host).split("%", 1)[0])
        except ValueError:
            pytest.fail(f"connection by name attempted: {host}")
        if not address.is_loopback:
            pytest.fail(f"connection attempted to {host}")

    real_connect = socket.socket.connect
    real_create = socket.create_connection
    loop_cls = asyncio.base_events.BaseEventLoop
    real_loop_create = loop_cls.create_connection

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            check(address[0])
        real_connect(self, address)

    def create(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        check(address[0])
        return real_create(address, *args, **kwargs)

    async def loop_create(self: Any, factory: Any, host: Any = None, *a: Any, **kw: Any) -> Any:
        check(host)
        return await real_loop_create(self, factory, host, *a, **kw)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "create_connection", create)
    monkeypatch.setattr(loop_cls, "create_connection", loop_create)
    return seen


@pytest.fixture(autouse=True)
def no_is_global(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard must decide from its own table: ``is_global``/``is_private`` blow up here."""

    def refuse(self: object) -> bool:
        raise AssertionError("the guard asked ipaddress for is_global/is_private")

    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for name in ("is_global", "is_private"):
            monkeypatch.setattr(cls, name, property(refuse))


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        type(self).seen.append((parts.path, self.headers.get("Host", "")))  # type: ignore[attr-defined]
        if parts.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", parse_qs(parts.query)["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.headers.get("Host", "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """(port, [(path, Host header)] of every request answered)."""
    seen: list[tuple[str, str]] = []
    with ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Handler,), {"seen": seen})) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        yield httpd.server_address[1], seen
        httpd.shutdown()


class _Routed(pinning.PinnedTransport):
    """Reaches the stub public addresses on the local server; records each checked address."""

    def __init__(self, port: int, *, closed: frozenset[str] = frozenset()) -> None:
        super().__init__(route=self._route)
        self.port = port
        self.closed = closed
        self.routed: list[str] = []

    def _route(self, address: pinning.IPAddress, port: int) -> tuple[str, int]:
        self.routed.append(str(address))
        if str(address) in self.closed:
            return "127.0.0.1", _closed_port()
        if str(address) in (PUBLIC_IP, CDN_IP):
            return "127.0.0.1", self.port
        return str(address), port


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stub(table: dict[str, list[str]]) -> tuple[netguard.Resolver, list[str]]:
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        if host not in table:
            raise OutboundUnresolvable(f"unknown test host {host}")
        return table[host]

    return resolve, asked


def _get(url: str, transport: pinning.PinnedTransport, **kw: Any) -> httpx.Response:
    with (
        httpx.Client(transport=transport, timeout=5, trust_env=False) as client,
        netguard.stream_get(client, url, max_redirects=kw.pop("max_redirects", 3), **kw) as got,
    ):
        got.read()
        return got


# --- the range table ---------------------------------------------------------------------------

# Each of these passes ipaddress.is_global (or one of the two old guards) on Python 3.11.7.
ONCE_GLOBAL = [
    "192.0.0.192",
    "::ffff:0:7f00:1",
    "::7f00:1",
    "64:ff9b:1::7f00:1",
    "fec0::1",
    "2002:7f00:1::",
]


@pytest.mark.parametrize("address", ONCE_GLOBAL)
def test_addresses_python_called_global_are_refused(address: str) -> None:
    assert netguard.refusal(ipaddress.ip_address(address)) is not None
    with pytest.raises(OutboundRefused):
        netguard.check_url(f"http://[{address}]/x" if ":" in address else f"http://{address}/x")


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("0.0.0.0", "this network"),
        ("10.255.255.255", "private use"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("172.31.0.1", "private use"),
        ("192.0.0.9", "IETF protocol assignments"),  # PCP anycast: reachable, still refused
        ("192.0.2.1", "TEST-NET-1"),
        ("192.88.99.1", "6to4 relay"),
        ("192.168.1.1", "private use"),
        ("198.19.255.255", "benchmarking"),
        ("198.51.100.7", "TEST-NET-2"),
        ("203.0.113.7", "TEST-NET-3"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("::ffff:0:7f00:1", "IPv4-translated"),
        ("::7f00:1", "IPv4-compatible"),
        ("::ffff:127.0.0.1", "IPv4-mapped 127.0.0.1: loopback"),
        ("::ffff:169.254.169.254", "IPv4-mapped 169.254.169.254: link-local"),
        ("64:ff9b::7f00:1", "NAT64 127.0.0.1: loopback"),
        ("64:ff9b::a9fe:a9fe", "NAT64 169.254.169.254: link-local"),
        ("64:ff9b:1::7f00:1", "local-use IPv4/IPv6 translation"),
        ("100::1", "discard-only"),
        ("2001:2::1", "IETF protocol assignments"),
        ("2001:db8::1", "documentation"),
        ("2002:7f00:1::", "6to4 127.0.0.1: loopback"),
        ("2002:a00:1::1", "6to4 10.0.0.1: private use"),
        # Teredo: the client's IPv4 is stored inverted (80ff:fffe is 127.0.0.1) ...
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo 127.0.0.1: loopback"),
        # ... and the server's is checked too (10.0.0.1 here, client 8.8.8.8).
        ("2001:0:a00:1:8000:63bf:f7f7:f7f7", "Teredo 10.0.0.1: private use"),
        ("3fff::1", "documentation"),
        ("5f00::1", "segment routing"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("1fff::1", "outside IPv6 global unicast"),
        ("4000::1", "outside IPv6 global unicast"),
        ("e000::1", "outside IPv6 global unicast"),
    ],
)
def test_refused_ranges(address: str, why: str) -> None:
    reason = netguard.refusal(ipaddress.ip_address(address))
    assert reason is not None, address
    assert why in reason, reason


@pytest.mark.parametrize(
    "address",
    [
        "1.0.0.1",
        "8.8.8.8",
        PUBLIC_IP,
        CDN_IP,
        "100.63.255.255",  # just below carrier-grade NAT
        "100.128.0.0",  # just above
        "172.15.255.255",
        "172.32.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "2000::1",
        "2001:4860:4860::8888",
        "2606:4700::1111",
        "2a00:1450:4001::200e",
        "::ffff:8.8.8.8",  # IPv4-mapped, judged by its IPv4
        "64:ff9b::808:808",  # NAT64 of 8.8.8.8 (an IPv6-only cluster with DNS64)
        "2002:808:808::1",  # 6to4 of 8.8.8.8
        "2001:0:4136:e378:8000:63bf:f7f7:f7f7",  # Teredo: server 65.54.227.120, client 8.8.8.8
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert netguard.refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("network", "why"), netguard.REFUSED, ids=[str(n) for n, _ in netguard.REFUSED]
)
def test_every_row_refuses_its_whole_range(network: netguard.IPNetwork, why: str) -> None:
    for address in (network.network_address, network.broadcast_address):
        assert netguard.refusal(address) is not None, address


# --- URL checks --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answers",
    [[PUBLIC_IP, "127.0.0.1"], ["127.0.0.1", PUBLIC_IP], [CDN_IP, "::1"], [PUBLIC_IP, "fec0::1"]],
)
def test_one_refused_answer_refuses_the_name_before_any_connection(
    server: tuple[int, list[tuple[str, str]]], connections: list[str], answers: list[str]
) -> None:
    port, seen = server
    before = len(seen)
    resolver, asked = _stub({"videos.example": answers})
    transport = _Routed(port)
    with pytest.raises(OutboundRefused):
        _get("http://videos.example/clip.mp4", transport, resolver=resolver)
    assert asked == ["videos.example"]
    assert connections == []  # no socket connected at all, loopback included
    assert transport.routed == []
    assert len(seen) == before


def test_literal_spellings() -> None:
    loopback = ipaddress.ip_address("127.0.0.1")
    for spelling in ("2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "127.0.0.1"):
        assert netguard.literal_address(spelling) == loopback, spelling
    assert netguard.literal_address("[::1]") == ipaddress.ip_address("::1")
    assert netguard.literal_address("example.com") is None
    assert netguard.literal_address("1.2.3.4.5") is None
    assert netguard.literal_address("deadbeef.example") is None
    for url in ("http://2130706433/", "http://0x7f000001/", "http://127.1/", "http://0177.0.0.1/"):
        with pytest.raises(OutboundRefused):
            netguard.check_url(url, resolver=lambda host, port: [PUBLIC_IP])


def test_check_url_shapes() -> None:
    resolver, _ = _stub({"videos.example": [PUBLIC_IP], "cdn.example": ["::ffff:" + CDN_IP]})
    target = netguard.check_url("https://VIDEOS.example:8443/a/b.mp4?x=1", resolver=resolver)
    assert (target.host, target.port) == ("videos.example", 8443)
    assert target.addresses == (ipaddress.ip_address(PUBLIC_IP),)
    mapped = netguard.check_url("http://cdn.example/x", resolver=resolver)
    assert mapped.addresses == (ipaddress.ip_address(CDN_IP),)  # connected to over IPv4
    idn = netguard.check_url("http://bücher.example/x", resolver=lambda host, port: [CDN_IP])
    assert (idn.host, idn.port) == ("xn--bcher-kva.example", 80)  # as httpx will send it
    for bad in (
        "http:///nohost",
        "ftp://videos.example/x",
        "file:///etc/passwd",
        "http://videos.example:0/x",
        "http://videos.example:65536/x",
        "http://videos.example:x/x",
    ):
        with pytest.raises(OutboundRefused):
            netguard.check_url(bad, resolver=resolver)
    with pytest.raises(OutboundUnresolvable):
        netguard.check_url("http://nowhere.example/x", resolver=lambda host, port: [])
    with pytest.raises(OutboundRefused):
        netguard.check_url("http://videos.example/x", resolver=lambda host, port: ["not-an-ip"])
    loopback = netguard.check_url("http://[::1]:81/x", resolver=resolver, allow_private=True)
    assert loopback.addresses == (ipaddress.ip_address("::1"),)


def test_system_resolver_failure_is_retryable() -> None:
    with pytest.raises(OutboundUnresolvable):
        netguard.check_url("http://no-such-host.invalid/x")


# --- pinned connections ------------------------------------------------------------------------


def test_name_is_sent_and_the_checked_address_connected(
    server: tuple[int, list[tuple[str, str]]], connections: list[str]
) -> None:
    port, _ = server
    answers = iter([["127.0.0.1"], ["10.0.0.1"]])  # a second lookup would rebind
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    response = _get(
        f"http://hooks.example:{port}/x",
        pinning.PinnedTransport(),
        resolver=rebinding,
        allow_private=True,
    )
    assert response.text == f"hooks.example:{port}"  # Host header: the name
    assert asked == ["hooks.example"]  # resolved once
    assert set(connections) == {"127.0.0.1"}


def test_public_name_reaches_only_its_checked_address(
    server: tuple[int, list[tuple[str, str]]], connections: list[str]
) -> None:
    port, _ = server
    resolver, asked = _stub({"videos.example": [PUBLIC_IP]})
    transport = _Routed(port)
    response = _get("http://videos.example/x", transport, resolver=resolver)
    assert response.text == "videos.example"
    assert transport.routed == [PUBLIC_IP]
    assert asked == ["videos.example"]
    assert set(connections) == {"127.0.0.1"}  # the local server standing in for PUBLIC_IP


def test_next_checked_address_is_tried_when_one_does_not_answer(
    server: tuple[int, list[tuple[str, str]]],
) -> None:
    port, _ = server
    resolver, _ = _stub({"videos.example": [PUBLIC_IP, CDN_IP]})
    transport = _Routed(port, closed=frozenset({PUBLIC_IP}))
    assert _get("http://videos.example/x", transport, resolver=resolver).status_code == 200
    assert transport.routed == [PUBLIC_IP, CDN_IP]


def test_unpinned_or_other_host_requests_never_connect(
    server: tuple[int, list[tuple[str, str]]], connections: list[str]
) -> None:
    port, _ = server
    target = netguard.check_url(f"http://127.0.0.1:{port}/x", allow_private=True)
    with httpx.Client(transport=pinning.PinnedTransport(), trust_env=False) as client:
        with pytest.raises(httpx.ConnectError, match="not checked"):
            client.get(f"http://127.0.0.1:{port}/x")  # no pin at all
        with pinning.pinned(target), pytest.raises(httpx.ConnectError, match="not checked"):
            client.get(f"http://localhost:{port}/x")  # pinned, but for another host
        with pinning.pinned(target), pytest.raises(httpx.ConnectError, match="not checked"):
            client.get(f"http://127.0.0.1:{port + 1}/x")  # ... or another port
    assert connections == []


async def test_async_transport_is_pinned_too(
    server: tuple[int, list[tuple[str, str]]], connections: list[str]
) -> None:
    port, _ = server
    target = netguard.check_url(
        f"http://hooks.example:{port}/x", allow_private=True, resolver=lambda h, p: ["127.0.0.1"]
    )
    async with httpx.AsyncClient(transport=pinning.AsyncPinnedTransport()) as client:
        with pytest.raises(httpx.ConnectError, match="not checked"):
            await client.get(target.url)
        assert connections == []
        with pinning.pinned(target):
            response = await client.get(target.url)
    assert response.text == f"hooks.example:{port}"
    assert set(connections) == {"127.0.0.1"}


# --- redirects ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:{port}/x",
        "http://[::1]:{port}/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fec0::1]/x",
        "http://internal.example/x",
        "ftp://videos.example/x",
    ],
)
def test_every_redirect_is_checked_again(
    server: tuple[int, list[tuple[str, str]]], connections: list[str], location: str
) -> None:
    port, seen = server
    before = len(seen)
    resolver, asked = _stub({"videos.example": [PUBLIC_IP], "internal.example": ["10.1.1.1"]})
    transport = _Routed(port)
    with pytest.raises(OutboundRefused):
        _get(
            f"http://videos.example/redirect?to={location.format(port=port)}",
            transport,
            resolver=resolver,
        )
    assert asked[0] == "videos.example"
    assert [path for path, _ in seen[before:]] == ["/redirect"]  # the first hop only
    assert transport.routed == [PUBLIC_IP]
    assert set(connections) == {"127.0.0.1"}


def test_redirect_to_a_public_name_is_followed_and_pinned(
    server: tuple[int, list[tuple[str, str]]],
) -> None:
    port, _ = server
    resolver, asked = _stub({"videos.example": [PUBLIC_IP], "cdn.example": [CDN_IP]})
    transport = _Routed(port)
    response = _get(
        "http://videos.example/redirect?to=http://cdn.example/clip.mp4",
        transport,
        resolver=resolver,
    )
    assert (str(response.url), response.text) == ("http://cdn.example/clip.mp4", "cdn.example")
    assert asked == ["videos.example", "cdn.example"]
    assert transport.routed == [PUBLIC_IP, CDN_IP]


def test_redirect_limit(server: tuple[int, list[tuple[str, str]]]) -> None:
    port, _ = server
    loop = f"http://127.0.0.1:{port}/redirect?to=/redirect%3Fto%3D/x"
    with pytest.raises(TooManyRedirects):
        _get(loop, pinning.PinnedTransport(), allow_private=True, max_redirects=1)
    assert _get(loop, pinning.PinnedTransport(), allow_private=True, max_redirects=2).text
