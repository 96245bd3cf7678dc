"""URLs as they may be shown: in error messages, logs, statuses, webhooks and dead letters.

Source and webhook URLs carry secrets in two places: the userinfo (``user:password@``) and the
query string (presigned URLs sign with ``X-Amz-Signature=...`` and friends). Neither is needed
to tell which resource was meant, so both are replaced by a marker wherever a URL is shown.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

import httpx

HIDDEN = "***"
UNPARSABLE = "<unparsable URL>"


def redact_url(url: str) -> str:
    """``url`` with its userinfo, query and fragment replaced by ``***``; scheme, host, port
    and path kept. A URL that cannot be parsed is not shown at all."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a malformed port
    except ValueError:
        return UNPARSABLE
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if "@" in parts.netloc:
        netloc = f"{HIDDEN}@{netloc}"
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            parts.path,
            HIDDEN if parts.query else "",
            HIDDEN if parts.fragment else "",
        )
    )


class RedactedUrlArgs(logging.Filter):
    """Redacts the URLs among a log record's arguments: httpx logs every request's full URL
    at INFO, secrets included."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) for a in record.args):
            record.args = tuple(
                redact_url(str(a)) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


def redact_logged_urls(logger: logging.Logger) -> None:
    """Make ``logger`` show URLs passed as log arguments redacted (idempotent)."""
    if not any(isinstance(f, RedactedUrlArgs) for f in logger.filters):
        logger.addFilter(RedactedUrlArgs())
