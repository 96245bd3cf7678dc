"""Webhook delivery over HTTP with httpx: one signed POST per attempt, classified.

Every attempt goes through :mod:`core.netguard`: the URL is checked (http/https, every address
its host resolves to outside the refused ranges unless ``allow_private_targets``, for tests and
the local stack) and the connection goes to an address that was checked, never to a second DNS
answer. Redirects are never followed: a 3xx is a failed attempt.

What the endpoint answers stays out of the result: the delivery log and dead letters, which
tenants read, get a status line (``HTTP 503``) and never the response body or a ``Location``,
so a callback URL cannot be used to read what some other server says.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from core import netguard, pinning
from core.config import NotifySettings
from core.errors import PermanentError, RetryableError
from core.urls import redact_logged_urls
from notify.base import DeliveryResult, Outcome, WebhookDelivery, WebhookMessage
from notify.errors import DeliveryFailed, TargetRefused, TargetUnresolvable
from notify.signing import decode_secret, signed_headers

_RETRYABLE_4XX = frozenset({408, 425, 429})
# httpx logs each request's URL, userinfo and presigned query included.
redact_logged_urls(logging.getLogger("httpx"))
_BODY_READ_MAX = 64 * 1024  # a longer answer is dropped unread, with its connection


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
            Outcome.DISABLED, status, code="webhook_endpoint_gone", detail="HTTP 410 Gone"
        )
    if status in _RETRYABLE_4XX or status >= 500:
        retry_after = None
        if status in (429, 503):
            retry_after = parse_retry_after(headers.get("retry-after"))
            if retry_after is not None:
                retry_after = min(retry_after, max_retry_after_s)
        return DeliveryResult(
            Outcome.RETRY,
            status,
            retry_after=retry_after,
            code="webhook_http_error",
            detail=f"HTTP {status}",
        )
    if 300 <= status < 400:
        # Never followed, like Stripe and Svix: the endpoint must name its final URL.
        return DeliveryResult(
            Outcome.RETRY,
            status,
            code="webhook_redirect_refused",
            detail=f"HTTP {status}; redirects are not followed",
        )
    return DeliveryResult(Outcome.FAILED, status, code="webhook_rejected", detail=f"HTTP {status}")


class WebhookSender(WebhookDelivery):
    """Standard Webhooks delivery with httpx: signed POST of the JSON body, no redirects.

    Every attempt carries the same ``webhook-id`` and body, a fresh ``webhook-timestamp`` and
    the signatures over them, one per configured secret.
    """

    def __init__(
        self, settings: NotifySettings, *, resolver: netguard.Resolver = netguard.system_resolver
    ) -> None:
        for secret in settings.webhook_secrets:
            decode_secret(secret)  # a malformed secret fails at start, not per delivery
        self._settings = settings
        self._secrets = tuple(settings.webhook_secrets)
        self._resolver = resolver
        self._client = httpx.AsyncClient(
            transport=pinning.AsyncPinnedTransport(max_connections=settings.max_concurrency),
            timeout=httpx.Timeout(settings.timeout_s),
            follow_redirects=False,
            trust_env=False,  # a proxy from the environment would bypass the target check
            headers={"user-agent": settings.user_agent},
        )

    async def deliver(self, url: str, message: WebhookMessage) -> DeliveryResult:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._settings.timeout_s):
                result = await self._post(await self._check(url), message)
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

    async def _check(self, url: str) -> pinning.Target:
        """The guard's verdict on ``url``, as notifier errors; DNS runs off the event loop."""
        try:
            return await asyncio.to_thread(
                netguard.check_url,
                url,
                allow_private=self._settings.allow_private_targets,
                resolver=self._resolver,
            )
        except netguard.OutboundRefused as exc:
            raise TargetRefused(exc.message) from None
        except netguard.OutboundUnresolvable as exc:
            raise TargetUnresolvable(exc.message) from None

    async def _post(self, target: pinning.Target, message: WebhookMessage) -> DeliveryResult:
        """The HTTP boundary: httpx exceptions become notifier errors here and nowhere else."""
        headers = signed_headers(message.id, message.body, self._secrets)
        headers["content-type"] = "application/json"
        try:
            with pinning.pinned(target):
                async with self._client.stream(
                    "POST", target.url, content=message.body, headers=headers
                ) as response:
                    await _drain(response)  # lets the connection go back to the pool
                    return classify(
                        response.status_code,
                        response.headers,
                        max_retry_after_s=self._settings.max_retry_after_s,
                    )
        except httpx.TimeoutException as exc:
            raise DeliveryFailed(f"timed out: {exc!r}", code="webhook_timeout") from None
        except httpx.ConnectError as exc:
            raise DeliveryFailed(
                f"connection failed: {exc}", code="webhook_connect_failed"
            ) from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise TargetRefused(f"invalid target: {exc}") from None
        except httpx.HTTPError as exc:
            # The class only: a protocol error's message quotes the bytes the endpoint sent.
            raise DeliveryFailed(f"{type(exc).__name__} from the endpoint") from None

    async def close(self) -> None:
        await self._client.aclose()


async def _drain(response: httpx.Response) -> None:
    """Read a small answer to its end, keeping none of it."""
    read = 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read > _BODY_READ_MAX:
            return
