"""HTTP downloads for fetch: every hop checked by :mod:`core.netguard` and connected to the
address it checked, under a byte cap and a total deadline that holds however slowly the server
sends; no partial file is left behind."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from core import netguard, pinning
from core.config import LimitSettings
from core.urls import redact_logged_urls, redact_url
from stages.errors import FetchFailed, FetchRefused, SourceNotFound, SourceTooLarge

_CHUNK = 1024 * 1024
# httpx logs each request's URL, userinfo and presigned query included.
redact_logged_urls(logging.getLogger("httpx"))


@dataclass(frozen=True)
class Download:
    """A finished HTTP download."""

    path: Path
    size_bytes: int
    final_url: str
    content_type: str | None


def download(
    url: str,
    dest: Path,
    limits: LimitSettings,
    *,
    resolver: netguard.Resolver = netguard.system_resolver,
    transport: pinning.PinnedTransport | None = None,
    name: str | None = None,
    deadline: float | None = None,
) -> Download:
    """Download ``url`` to ``dest``, each hop checked and pinned; no partial file is left.
    All of it, connecting and every wait for bytes included, ends within
    ``limits.total_timeout_s`` (or by ``deadline``, a ``time.monotonic()`` instant) however
    slowly the server sends. Messages call the source
    ``name`` (default: the URL without its userinfo and query, which may hold secrets).

    Errors: ``FetchRefused`` (URL, redirect or 4xx refused; ``too_many_redirects`` beyond
    ``limits.max_redirects``), ``SourceNotFound`` (404/410), ``SourceTooLarge``
    (``limit_bytes``), ``FetchFailed`` (DNS, network, timeouts, 5xx, 429).
    """
    if deadline is None:
        deadline = time.monotonic() + limits.total_timeout_s
    timeout = httpx.Timeout(limits.read_timeout_s, connect=limits.connect_timeout_s)
    try:
        with (
            pinning.deadline(deadline),
            httpx.Client(
                transport=transport or pinning.PinnedTransport(), timeout=timeout, trust_env=False
            ) as client,
            netguard.stream_get(
                client,
                url,
                max_redirects=limits.max_redirects,
                allow_private=limits.allow_private,
                resolver=resolver,
                headers={"Accept-Encoding": "identity"},
            ) as response,
        ):
            final = name or redact_url(str(response.url))
            _raise_for_status(response.status_code, final, response.headers.get("retry-after"))
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limits.max_bytes:
                raise SourceTooLarge(
                    f"{final} declares {declared} bytes, above the {limits.max_bytes} limit",
                    code="limit_bytes",
                )
            _write_capped(response.iter_raw(_CHUNK), dest, final, limits, deadline)
            size = dest.stat().st_size
            return Download(dest, size, str(response.url), response.headers.get("content-type"))
    except (netguard.OutboundRefused, netguard.OutboundUnresolvable, httpx.HTTPError) as exc:
        dest.unlink(missing_ok=True)
        raise _fetch_error(name or redact_url(url), limits, exc) from exc
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def _fetch_error(shown: str, limits: LimitSettings, exc: Exception) -> FetchRefused | FetchFailed:
    """The guard's and httpx's exceptions as fetch errors with their reason codes; ``shown``
    is the redacted URL."""
    if isinstance(exc, netguard.OutboundRefused):
        code = "too_many_redirects" if isinstance(exc, netguard.TooManyRedirects) else None
        return FetchRefused(exc.message, code=code or "fetch_refused")
    if isinstance(exc, netguard.OutboundUnresolvable):
        return FetchFailed(exc.message, code="dns_failed")
    if isinstance(exc, httpx.TimeoutException):
        return FetchFailed(
            f"timed out fetching {shown} (at most {limits.total_timeout_s} s in all): {exc}",
            code="fetch_timeout",
        )
    return FetchFailed(f"cannot fetch {shown}: {exc}", code="fetch_failed")


def _write_capped(
    blocks: Iterable[bytes], dest: Path, uri: str, limits: LimitSettings, deadline: float
) -> None:
    written = 0
    with dest.open("wb") as out:
        for block in blocks:
            written += len(block)
            if written > limits.max_bytes:
                raise SourceTooLarge(
                    f"{uri} is larger than the {limits.max_bytes} byte limit", code="limit_bytes"
                )
            if time.monotonic() > deadline:
                raise FetchFailed(
                    f"{uri} took longer than {limits.total_timeout_s} s", code="fetch_timeout"
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
