"""URLs as shown in messages and logs: no userinfo, no query."""

from __future__ import annotations

import logging

import httpx
import pytest

from core.urls import UNPARSABLE, redact_logged_urls, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://user:pw@hooks.example.com:8443/x?y=1",
            "https://***@hooks.example.com:8443/x?***",
        ),
        ("https://hooks.example.com/x", "https://hooks.example.com/x"),
        (
            "HTTPS://Host.Example/a/b.mp4?X-Amz-Signature=s#f",
            "https://host.example/a/b.mp4?***#***",
        ),
        ("http://u@[::1]:8080/v.mp4", "http://***@[::1]:8080/v.mp4"),
        ("s3://bucket/key/v.mp4", "s3://bucket/key/v.mp4"),
        ("http://h:notaport/x", UNPARSABLE),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_logged_httpx_urls_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.core.urls")
    redact_logged_urls(logger)
    redact_logged_urls(logger)  # idempotent
    caplog.set_level(logging.INFO, logger.name)
    logger.info("GET %s", httpx.URL("http://u:pw@h.example/v.mp4?sig=abc"))
    assert caplog.messages == ["GET http://***@h.example/v.mp4?***"]
