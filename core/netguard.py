"""One outbound-network guard for every URL the service opens: video sources and webhooks.

A URL from an upload event is untrusted: it may point at the cloud metadata service, at
localhost or at anything inside the cluster network, directly or through a DNS name that
answers one address when checked and another when connected (rebinding). So:

1. only ``http``/``https``, on ports 1-65535; the host is read the way httpx will read it
   (IDNA), and numeric spellings (``2130706433``, ``0x7f000001``, ``127.1``) the way the C
   library would;
2. the host is resolved once and every address is checked against ``REFUSED``, a table
   written here from the IANA special-purpose registries. ``ipaddress.is_global`` is never
   asked: its answers change with the Python patch level (3.11.7 calls ``192.0.0.192``,
   ``64:ff9b:1::7f00:1`` and ``fec0::1`` global). IPv4 inside IPv6 (mapped, NAT64, 6to4,
   Teredo) is judged by its IPv4 addresses;
3. the connection goes to a checked address (``core.pinning``): the network backend of
   ``PinnedTransport`` connects only to the addresses checked for the request in progress
   (``pinned``), and refuses when there are none. The URL keeps its host name, so the ``Host``
   header, TLS SNI, the certificate check and httpx's connection pool all go by the name;
4. ``stream_get`` follows redirects by hand, each hop checked and pinned again (sources);
   webhooks follow none;
5. inside ``pinning.deadline(at)`` every socket wait of ``PinnedTransport`` (connect, TLS, each read
   and write) is cut to the time left, so a peer that sends a byte now and then cannot stretch
   a request past ``at``: it ends with a timeout within one wait of the deadline.

Proxies are never used: a proxy would connect on our behalf to an address nobody checked.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import urljoin

import httpx

from core.errors import PermanentError, RetryableError
from core.pinning import IPAddress, Target, pinned

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]
"""Maps (host, port) to the IP addresses (as strings) a connection would use."""


class OutboundRefused(PermanentError):
    """The guard refuses a URL: scheme, host, port, or an address in ``REFUSED``."""

    code = "outbound_refused"


class TooManyRedirects(OutboundRefused):
    code = "too_many_redirects"


class OutboundUnresolvable(RetryableError):
    """The host name did not resolve; DNS may come back."""

    code = "outbound_unresolvable"


def _table(rows: Iterable[tuple[str, str]]) -> tuple[tuple[IPNetwork, str], ...]:
    networks = [(ipaddress.ip_network(cidr), why) for cidr, why in rows]
    # Most specific first, so a refusal names the narrowest range.
    return tuple(sorted(networks, key=lambda row: -row[0].prefixlen))


# Every block of the IANA IPv4 and IPv6 special-purpose address registries, multicast, and
# IPv6 outside global unicast. Blocks the registry marks globally reachable (PCP/TURN anycast,
# AS112, AMT, ORCHIDv2, drone remote ID) are refused too: none of them serves a video or a
# webhook. NAT64 64:ff9b::/96, 6to4 and Teredo are not rows: see ``_EMBEDDED``.
REFUSED: tuple[tuple[IPNetwork, str], ...] = _table(
    [
        ("0.0.0.0/8", "'this network' (RFC 791)"),
        ("10.0.0.0/8", "private use (RFC 1918)"),
        ("100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)"),
        ("127.0.0.0/8", "loopback (RFC 1122)"),
        ("169.254.0.0/16", "link-local, cloud metadata (RFC 3927)"),
        ("172.16.0.0/12", "private use (RFC 1918)"),
        ("192.0.0.0/24", "IETF protocol assignments (RFC 6890)"),
        ("192.0.2.0/24", "documentation TEST-NET-1 (RFC 5737)"),
        ("192.31.196.0/24", "AS112-v4 (RFC 7535)"),
        ("192.52.193.0/24", "AMT (RFC 7450)"),
        ("192.88.99.0/24", "6to4 relay anycast, deprecated (RFC 7526)"),
        ("192.168.0.0/16", "private use (RFC 1918)"),
        ("192.175.48.0/24", "AS112 direct delegation (RFC 7534)"),
        ("198.18.0.0/15", "benchmarking (RFC 2544)"),
        ("198.51.100.0/24", "documentation TEST-NET-2 (RFC 5737)"),
        ("203.0.113.0/24", "documentation TEST-NET-3 (RFC 5737)"),
        ("224.0.0.0/4", "multicast (RFC 5771)"),
        ("240.0.0.0/4", "reserved, limited broadcast (RFC 1112, RFC 919)"),
        ("::/128", "unspecified (RFC 4291)"),
        ("::1/128", "loopback (RFC 4291)"),
        ("::/96", "IPv4-compatible, deprecated (RFC 4291)"),
        ("::ffff:0:0:0/96", "IPv4-translated (RFC 2765)"),
        ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation (RFC 8215)"),
        ("100::/64", "discard-only (RFC 6666)"),
        ("100:0:0:1::/64", "dummy prefix (RFC 9780)"),
        ("2001::/23", "IETF protocol assignments (RFC 2928)"),
        ("2001:db8::/32", "documentation (RFC 3849)"),
        ("2620:4f:8000::/48", "AS112 direct delegation (RFC 7534)"),
        ("3fff::/20", "documentation (RFC 9637)"),
        ("5f00::/16", "segment routing SIDs (RFC 9602)"),
        ("fc00::/7", "unique local (RFC 4193)"),
        ("fe80::/10", "link-local (RFC 4291)"),
        ("fec0::/10", "site-local, deprecated (RFC 3879)"),
        ("ff00::/8", "multicast (RFC 4291)"),
        ("::/3", "outside IPv6 global unicast 2000::/3"),
        ("4000::/2", "outside IPv6 global unicast 2000::/3"),
        ("8000::/1", "outside IPv6 global unicast 2000::/3"),
    ]
)

_LOW32 = 0xFFFFFFFF
# IPv6 ranges that carry IPv4 addresses: such an address is as safe as the IPv4 it reaches.
_EMBEDDED: tuple[tuple[ipaddress.IPv6Network, str, Callable[[int], tuple[int, ...]]], ...] = (
    (ipaddress.IPv6Network("::ffff:0:0/96"), "IPv4-mapped", lambda v: (v & _LOW32,)),
    (ipaddress.IPv6Network("64:ff9b::/96"), "NAT64", lambda v: (v & _LOW32,)),
    (ipaddress.IPv6Network("2002::/16"), "6to4", lambda v: ((v >> 80) & _LOW32,)),
    # Teredo: the server's IPv4 in bits 64-95, the client's in the last 32 bits, inverted.
    (ipaddress.IPv6Network("2001::/32"), "Teredo", lambda v: ((v >> 64) & _LOW32, ~v & _LOW32)),
)
_NUMERIC_V4 = re.compile(r"^[0-9a-fA-FxX.]+$")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` must not be connected to, or None when it may be."""
    if isinstance(address, ipaddress.IPv6Address):
        for carrier, kind, unpack in _EMBEDDED:
            if address in carrier:
                for inner in unpack(int(address)):
                    why = refusal(ipaddress.IPv4Address(inner))
                    if why is not None:
                        return f"{kind} {ipaddress.IPv4Address(inner)}: {why}"
                return None
    for network, why in REFUSED:
        if address in network:
            return f"{why}, {network}"
    return None


def literal_address(host: str) -> IPAddress | None:
    """The IP a literal host names, in any spelling ``inet_aton`` accepts, else None."""
    candidate = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(candidate.split("%", 1)[0])
    except ValueError:
        pass
    if _NUMERIC_V4.match(candidate):
        try:  # decimal, hex and octal forms: 2130706433, 0x7f000001, 0177.0.0.1, 127.1
            return ipaddress.IPv4Address(socket.inet_aton(candidate))
        except OSError:
            return None
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the system's ``getaddrinfo``."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise OutboundUnresolvable(f"cannot resolve {host!r}: {exc}") from exc
    return [str(info[4][0]) for info in infos]


def check_url(
    url: str, *, allow_private: bool = False, resolver: Resolver = system_resolver
) -> Target:
    """Validate ``url`` and resolve its host once, without connecting.

    Raises ``OutboundRefused`` for another scheme, a missing host, a bad port or a refused
    address (one refused address refuses the URL), ``OutboundUnresolvable`` when the name does
    not resolve.
    ``allow_private`` skips the address table (tests and the local stack use loopback).
    """
    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii")
        port = parsed.port
    except (httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise OutboundRefused(f"malformed URL: {exc}") from exc
    if parsed.scheme not in _DEFAULT_PORTS:
        raise OutboundRefused(f"scheme {parsed.scheme!r} is not allowed")
    if not host:
        raise OutboundRefused("the URL has no host")
    port = _DEFAULT_PORTS[parsed.scheme] if port is None else port
    if not 0 < port < 65536:
        raise OutboundRefused(f"port {port} is out of range")
    literal = literal_address(host)
    addresses = (literal,) if literal is not None else _resolve(resolver, host, port)
    if not allow_private:
        for address in addresses:
            why = refusal(address)
            if why is not None:
                raise OutboundRefused(f"{host} resolves to {address}: {why}")
    return Target(url=url, host=host, port=port, addresses=addresses)


def _resolve(resolver: Resolver, host: str, port: int) -> tuple[IPAddress, ...]:
    found: list[IPAddress] = []
    for raw in resolver(host, port):
        try:
            address = ipaddress.ip_address(raw.split("%", 1)[0])
        except ValueError as exc:
            raise OutboundRefused(f"bad address {raw!r} for {host}") from exc
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # connect over IPv4 to the address that was judged
        found.append(address)
    if not found:
        raise OutboundUnresolvable(f"{host} resolved to no address")
    return tuple(dict.fromkeys(found))


_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@contextmanager
def stream_get(
    client: httpx.Client,
    url: str,
    *,
    max_redirects: int,
    allow_private: bool = False,
    resolver: Resolver = system_resolver,
    headers: Mapping[str, str] | None = None,
) -> Iterator[httpx.Response]:
    """GET ``url`` with ``client`` (built on :class:`PinnedTransport`), following redirects.

    Every hop is checked and pinned; the final response (``response.url`` says which) is
    yielded unread. Raises what ``check_url`` raises, and ``TooManyRedirects``.
    """
    current = url
    for _ in range(max_redirects + 1):
        target = check_url(current, allow_private=allow_private, resolver=resolver)
        with pinned(target), client.stream("GET", current, headers=headers) as response:
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or not location:
                yield response
                return
        current = urljoin(current, location)
    raise TooManyRedirects(f"more than {max_redirects} redirects")
