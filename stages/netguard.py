"""SSRF-safe HTTP(S) downloads.

A URL from an upload event is untrusted: it may point at the cloud metadata service, at
localhost or at anything inside the cluster network. Every hop (the URL and each redirect) is
checked before a connection is opened:

1. only ``http``/``https``;
2. the host is resolved once (numeric spellings such as ``2130706433`` or ``0x7f000001`` are
   normalised the way the C library would read them) and every address must be globally
   routable (IPv4-mapped and NAT64 IPv6 addresses are judged by their IPv4 part);
3. the connection goes to the checked address itself (the URL is rewritten to the IP, the
   ``Host`` header and TLS SNI carry the name, so certificates are still verified against the
   name): a second DNS answer (rebinding) is never used;
4. redirects are followed by hand, each one checked again, up to a limit;
5. the body is streamed to disk under a byte cap, with connect, read and total time limits.

Proxies from the environment are ignored: a proxy would connect on our behalf to an
unchecked address.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from stages.errors import FetchFailed, FetchRefused, SourceNotFound, SourceTooLarge

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]
"""Maps (host, port) to the IP addresses (as strings) a connection would use."""

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NUMERIC_V4 = re.compile(r"^[0-9a-fA-FxX.]+$")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 256 * 1024


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the system's ``getaddrinfo``; a name that does not resolve is refused."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchFailed(f"cannot resolve host {host!r}: {exc}", code="dns_failed") from exc
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True)
class FetchPolicy:
    """Limits of one download."""

    max_bytes: int
    allow_private: bool = False  # tests and the local demo fetch from 127.0.0.1
    max_redirects: int = 5
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    total_timeout_s: float = 600.0


@dataclass(frozen=True)
class Target:
    """A checked hop: where to connect and what name to present."""

    url: str  # the URL as requested (with the host name)
    host: str
    port: int
    address: IPAddress

    @property
    def pinned_url(self) -> str:
        """The URL with the checked IP in place of the host name."""
        parts = urlsplit(self.url)
        ip = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return urlunsplit((parts.scheme, f"{ip}:{self.port}", parts.path or "/", parts.query, ""))


@dataclass(frozen=True)
class Download:
    path: Path
    size_bytes: int
    final_url: str
    content_type: str | None


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


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is globally routable unicast (judging embedded IPv4 by itself)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public(address.ipv4_mapped)
        if address in _NAT64:
            return is_public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return address.is_global and not address.is_multicast


def check_url(
    url: str, *, resolver: Resolver = system_resolver, allow_private: bool = False
) -> Target:
    """Validate ``url`` and pick the address to connect to, without connecting.

    Raises :class:`FetchRefused` (``fetch_refused``) for other schemes, missing hosts and
    non-public addresses. Every resolved address must be public: a name that resolves to
    one public and one private address is refused too.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise FetchRefused(f"malformed URL: {exc}", code="fetch_refused") from exc
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"scheme {parts.scheme!r} is not allowed", code="fetch_refused")
    host = parts.hostname
    if not host:
        raise FetchRefused("URL has no host", code="fetch_refused")
    try:  # the Host header and SNI need the ASCII (IDNA) form of a non-ASCII name
        host = host.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise FetchRefused(f"host {host!r} is not a valid name", code="fetch_refused") from exc
    port = port or (443 if parts.scheme == "https" else 80)
    literal = literal_address(host)
    addresses = [literal] if literal is not None else _resolve(resolver, host, port)
    if not addresses:
        raise FetchFailed(f"host {host!r} has no address", code="dns_failed")
    if not allow_private:
        for address in addresses:
            if not is_public(address):
                raise FetchRefused(
                    f"host {host!r} resolves to {address}, which is not a public address",
                    code="fetch_refused",
                )
    return Target(url=url, host=host, port=port, address=addresses[0])


def _resolve(resolver: Resolver, host: str, port: int) -> list[IPAddress]:
    found: list[IPAddress] = []
    for raw in resolver(host, port):
        try:
            found.append(ipaddress.ip_address(raw.split("%", 1)[0]))
        except ValueError as exc:
            raise FetchRefused(
                f"resolver gave a bad address {raw!r}", code="fetch_refused"
            ) from exc
    return found


def download(
    url: str,
    dest: Path,
    policy: FetchPolicy,
    *,
    resolver: Resolver = system_resolver,
    transport: httpx.BaseTransport | None = None,
) -> Download:
    """Download ``url`` to ``dest`` under ``policy``; partial files are removed on failure.

    Errors: :class:`FetchRefused` (URL or a redirect not allowed), :class:`SourceNotFound`
    (404/410), :class:`SourceTooLarge` (``limit_bytes``), :class:`FetchFailed` (network
    errors, timeouts, 5xx, 429).
    """
    deadline = time.monotonic() + policy.total_timeout_s
    timeout = httpx.Timeout(
        connect=policy.connect_timeout_s,
        read=policy.read_timeout_s,
        write=policy.read_timeout_s,
        pool=policy.connect_timeout_s,
    )
    current = url
    try:
        with httpx.Client(
            timeout=timeout, follow_redirects=False, trust_env=False, transport=transport
        ) as client:
            for _ in range(policy.max_redirects + 1):
                target = check_url(current, resolver=resolver, allow_private=policy.allow_private)
                location, content_type = _fetch_hop(client, target, dest, policy, deadline)
                if location is None:
                    return Download(dest, dest.stat().st_size, current, content_type)
                current = urljoin(current, location)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    raise FetchRefused(f"more than {policy.max_redirects} redirects", code="too_many_redirects")


def _fetch_hop(
    client: httpx.Client, target: Target, dest: Path, policy: FetchPolicy, deadline: float
) -> tuple[str | None, str | None]:
    """One request: (redirect location, None), or (None, content type) once the body is saved."""
    https = target.url.startswith("https")
    host_header = f"[{target.host}]" if ":" in target.host else target.host
    if target.port != (443 if https else 80):
        host_header = f"{host_header}:{target.port}"
    headers = {"Host": host_header, "Accept-Encoding": "identity"}
    # TLS still presents and verifies the host name although the URL carries the IP.
    extensions = {"sni_hostname": target.host} if https else {}
    try:
        with client.stream(
            "GET", target.pinned_url, headers=headers, extensions=extensions
        ) as response:
            status = response.status_code
            if status in _REDIRECTS:
                location = response.headers.get("location")
                if not location:
                    raise FetchFailed(f"redirect {status} without Location", code="fetch_failed")
                return location, None
            _raise_for_status(status, target.url, response.headers.get("retry-after"))
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > policy.max_bytes:
                raise SourceTooLarge(
                    f"{target.url} declares {declared} bytes, above the {policy.max_bytes} limit",
                    code="limit_bytes",
                )
            _save_body(response, target, dest, policy, deadline)
            return None, response.headers.get("content-type")
    except httpx.TimeoutException as exc:
        raise FetchFailed(f"timed out fetching {target.url}: {exc}", code="fetch_timeout") from exc
    except httpx.HTTPError as exc:
        raise FetchFailed(f"cannot fetch {target.url}: {exc}", code="fetch_failed") from exc


def _save_body(
    response: httpx.Response, target: Target, dest: Path, policy: FetchPolicy, deadline: float
) -> None:
    written = 0
    with dest.open("wb") as out:
        for block in response.iter_raw(_CHUNK):
            written += len(block)
            if written > policy.max_bytes:
                raise SourceTooLarge(
                    f"{target.url} is larger than the {policy.max_bytes} byte limit",
                    code="limit_bytes",
                )
            if time.monotonic() > deadline:
                raise FetchFailed(
                    f"{target.url} took longer than {policy.total_timeout_s}s",
                    code="fetch_timeout",
                )
            out.write(block)


def _raise_for_status(status: int, url: str, retry_after: str | None) -> None:
    if 200 <= status < 300:
        return
    if status in (404, 410):
        raise SourceNotFound(f"{url} answered {status}", code="source_not_found")
    if status in (408, 425, 429) or status >= 500:
        delay = float(retry_after) if retry_after and retry_after.isdigit() else None
        raise FetchFailed(f"{url} answered {status}", code="fetch_failed", retry_after=delay)
    if status in (401, 403):
        raise FetchRefused(f"{url} answered {status}", code="source_forbidden")
    raise FetchRefused(f"{url} answered {status}", code="http_error")
