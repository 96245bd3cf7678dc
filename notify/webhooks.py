"""Webhook delivery over HTTP with httpx: one signed POST per attempt, classified.

Before any connection the target is checked: http/https only, and every address its host
resolves to must be globally routable unless ``allow_private_targets`` (tests, local demo).
Redirects are never followed: a 3xx is a failed attempt, so a redirect cannot lead a request
to an address that was never checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit, urlunsplit

import httpx

from core.config import NotifySettings
from core.errors import PermanentError, RetryableError
from notify.base import DeliveryResult, Outcome, WebhookDelivery, WebhookMessage
from notify.errors import DeliveryFailed, TargetRefused, TargetUnresolvable
from notify.signing import decode_secret, signed_headers

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_RETRYABLE_4XX = frozenset({408, 425, 429})
_BODY_KEPT = 256  # characters of an error response kept for the delivery log
_BODY_READ_MAX = 64 * 1024  # beyond this the response is dropped unread


def is_public_address(ip: IPAddress) -> bool:
    """Globally routable unicast, also for IPv4 hidden inside IPv6 (mapped, 6to4, NAT64)."""
    if ip.is_multicast or not ip.is_global:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[IPAddress | None] = [ip.ipv4_mapped, ip.sixtofour]
        if ip.teredo:
            embedded.extend(ip.teredo)
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        return all(is_public_address(e) for e in embedded if e is not None)
    return True


async def check_target(url: str, *, allow_private: bool) -> list[IPAddress]:
    """Refuse a URL we must not call; returns the addresses its host resolves to.

    Raises ``TargetRefused`` (scheme, missing host, non-public address) or
    ``TargetUnresolvable`` (DNS failure, worth retrying). A full SSRF-safe HTTP layer would
    also pin the connection to the checked addresses; until then a DNS answer that changes
    between this check and httpx's own lookup is not caught.
    """
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused(f"malformed URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(f"scheme {parts.scheme!r} is not allowed; use http or https")
    host = parts.hostname
    if not host:
        raise TargetRefused("the URL has no host")
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError) as exc:
            raise TargetUnresolvable(f"{host} did not resolve: {exc}") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    if not addresses:
        raise TargetUnresolvable(f"{host} resolved to no address")
    if not allow_private:
        refused = [str(ip) for ip in addresses if not is_public_address(ip)]
        if refused:
            raise TargetRefused(f"{host} resolves to non-public address {', '.join(refused)}")
    return addresses


def redact_url(url: str) -> str:
    """The URL without user:password, for logs and the delivery log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0.0, when.timestamp() - current)


def classify(
    status: int, headers: Mapping[str, str], *, max_retry_after_s: float
) -> DeliveryResult:
    """What an HTTP status means for this message and for the endpoint."""
    if 200 <= status < 300:
        return DeliveryResult(Outcome.DELIVERED, status)
    if status == 410:
        return DeliveryResult(
            Outcome.DISABLED, status, code="webhook_endpoint_gone", detail="410 Gone"
        )
    if status in _RETRYABLE_4XX or status >= 500:
        retry_after = None
        if status in (429, 503):
            retry_after = parse_retry_after(headers.get("retry-after"))
            if retry_after is not None:
                retry_after = min(retry_after, max_retry_after_s)
        return DeliveryResult(
            Outcome.RETRY, status, retry_after=retry_after, code="webhook_http_error"
        )
    if 300 <= status < 400:
        # Never followed: the next hop was not checked. Failed for now, like any non-2xx.
        where = headers.get("location", "")
        return DeliveryResult(
            Outcome.RETRY, status, code="webhook_redirect_refused", detail=f"-> {where}"
        )
    return DeliveryResult(Outcome.FAILED, status, code="webhook_rejected")


class WebhookSender(WebhookDelivery):
    """Standard Webhooks delivery with httpx: signed POST of the JSON body, no redirects.

    Every attempt carries the same ``webhook-id`` and body, a fresh ``webhook-timestamp`` and
    the signatures over them, one per configured secret.
    """

    def __init__(self, settings: NotifySettings, *, client: httpx.AsyncClient | None = None):
        for secret in settings.webhook_secrets:
            decode_secret(secret)  # a malformed secret fails at start, not per delivery
        self._settings = settings
        self._secrets = tuple(settings.webhook_secrets)
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s),
            follow_redirects=False,
            trust_env=False,  # a proxy from the environment would bypass the target check
            limits=httpx.Limits(max_connections=settings.max_concurrency),
            headers={"user-agent": settings.user_agent},
        )

    async def deliver(self, url: str, message: WebhookMessage) -> DeliveryResult:
        started = time.perf_counter()
        try:
            await check_target(url, allow_private=self._settings.allow_private_targets)
            async with asyncio.timeout(self._settings.timeout_s):
                result = await self._post(url, message)
        except TimeoutError:
            result = DeliveryResult(
                Outcome.RETRY, code="webhook_timeout", detail="no answer in time"
            )
        except RetryableError as exc:
            result = DeliveryResult(Outcome.RETRY, code=exc.code, detail=exc.message)
        except PermanentError as exc:
            result = DeliveryResult(Outcome.FAILED, code=exc.code, detail=exc.message)
        return DeliveryResult(
            result.outcome,
            result.status_code,
            retry_after=result.retry_after,
            code=result.code,
            detail=result.detail,
            duration_s=time.perf_counter() - started,
        )

    async def _post(self, url: str, message: WebhookMessage) -> DeliveryResult:
        """The HTTP boundary: httpx exceptions become notifier errors here and nowhere else."""
        headers = signed_headers(message.id, message.body, self._secrets)
        headers["content-type"] = "application/json"
        try:
            async with self._client.stream(
                "POST", url, content=message.body, headers=headers
            ) as response:
                result = classify(
                    response.status_code,
                    response.headers,
                    max_retry_after_s=self._settings.max_retry_after_s,
                )
                if result.outcome is Outcome.DELIVERED:
                    await _drain(response)  # lets the connection go back to the pool
                    return result
                snippet = await _drain(response)
        except httpx.TimeoutException as exc:
            raise DeliveryFailed(f"timed out: {exc!r}", code="webhook_timeout") from None
        except httpx.ConnectError as exc:
            raise DeliveryFailed(
                f"connection failed: {exc}", code="webhook_connect_failed"
            ) from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise TargetRefused(f"invalid target: {exc}") from None
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from None
        detail = " ".join(part for part in (result.detail, snippet) if part)
        return DeliveryResult(
            result.outcome,
            result.status_code,
            retry_after=result.retry_after,
            code=result.code,
            detail=detail,
        )

    async def close(self) -> None:
        await self._client.aclose()


async def _drain(response: httpx.Response) -> str:
    """Read a small answer to its end; the start of it, as text, for the log."""
    kept = bytearray()
    read = 0
    async for chunk in response.aiter_bytes():
        read += len(chunk)
        if len(kept) < _BODY_KEPT:
            kept.extend(chunk[: _BODY_KEPT - len(kept)])
        if read > _BODY_READ_MAX:
            break
    return kept.decode("utf-8", errors="replace").strip()
