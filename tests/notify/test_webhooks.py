"""WebhookSender against a real HTTP receiver on 127.0.0.1, through the network guard."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook

from core.config import NotifySettings
from devkit.receiver import Reply, WebhookReceiver
from devkit.services import free_port
from notify.base import Outcome, WebhookMessage
from notify.signing import generate_secret
from notify.webhooks import WebhookSender, classify, parse_retry_after
from tests.notify.support import SECRET, make_event
from tests.notify.support import notify_settings as base_settings


def settings(**kw: Any) -> NotifySettings:
    return base_settings(**kw)


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    async with WebhookReceiver() as r:
        yield r


@pytest.fixture
async def sender() -> AsyncIterator[WebhookSender]:
    s = WebhookSender(settings())
    yield s
    await s.close()


@pytest.fixture
async def connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every outgoing connection attempt of this test, recorded and let through."""
    seen: list[Any] = []
    loop_cls = type(asyncio.get_running_loop())
    real_create = loop_cls.create_connection
    real_sock_connect = loop_cls.sock_connect
    real_connect = socket.socket.connect

    async def create_connection(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(args[1:3] if len(args) > 2 else kwargs.get("host"))
        return await real_create(self, *args, **kwargs)

    async def sock_connect(self: Any, sock: Any, address: Any) -> Any:
        seen.append(address)
        return await real_sock_connect(self, sock, address)

    def connect(self: socket.socket, address: Any) -> Any:
        seen.append(address)
        return real_connect(self, address)

    monkeypatch.setattr(loop_cls, "create_connection", create_connection)
    monkeypatch.setattr(loop_cls, "sock_connect", sock_connect)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return seen


def test_payload_is_the_standard_webhooks_shape() -> None:
    message = WebhookMessage.from_event(make_event())
    assert message.id == make_event().webhook_id
    assert message.id.startswith("msg_")
    assert json.loads(message.body) == {
        "type": "video.done",
        "timestamp": "2026-01-02T03:04:05Z",
        "data": {"video_id": "vid-1", "tenant": "acme", "pipeline_version": "pv1", "frames": 12},
    }


async def test_delivered_and_verified_by_the_reference_library(
    receiver: WebhookReceiver, sender: WebhookSender
) -> None:
    message = WebhookMessage.from_event(make_event())
    result = await sender.deliver(receiver.url(), message)
    assert result.outcome is Outcome.DELIVERED
    assert result.status_code == 200
    [got] = receiver.requests
    assert got.headers["content-type"] == "application/json"
    assert got.headers["webhook-id"] == message.id
    assert got.headers["user-agent"].startswith("reelsense-webhooks/")
    payload = Webhook(SECRET).verify(got.body, got.headers)
    assert payload["type"] == "video.done"
    assert payload["data"]["video_id"] == "vid-1"


async def test_signature_rotation_both_secrets_verify(receiver: WebhookReceiver) -> None:
    other = generate_secret()
    sender = WebhookSender(settings(webhook_secrets=(SecretStr(SECRET), SecretStr(other))))
    try:
        await sender.deliver(receiver.url(), WebhookMessage.from_event(make_event()))
    finally:
        await sender.close()
    [got] = receiver.requests
    Webhook(SECRET).verify(got.body, got.headers)
    Webhook(other).verify(got.body, got.headers)


@pytest.mark.parametrize(
    ("reply", "outcome", "code"),
    [
        (Reply(204), Outcome.DELIVERED, None),
        (Reply(500, body="boom"), Outcome.RETRY, "webhook_http_error"),
        (Reply(502), Outcome.RETRY, "webhook_http_error"),
        (Reply(408), Outcome.RETRY, "webhook_http_error"),
        (Reply(410), Outcome.DISABLED, "webhook_endpoint_gone"),
        (Reply(400, body="bad payload"), Outcome.FAILED, "webhook_rejected"),
        (Reply(401), Outcome.FAILED, "webhook_rejected"),
        (Reply(404), Outcome.FAILED, "webhook_rejected"),
    ],
)
async def test_status_codes_are_classified(
    receiver: WebhookReceiver,
    sender: WebhookSender,
    reply: Reply,
    outcome: Outcome,
    code: str | None,
) -> None:
    receiver.script("/hook", [reply])
    result = await sender.deliver(receiver.url(), WebhookMessage.from_event(make_event()))
    assert (result.outcome, result.status_code, result.code) == (outcome, reply.status, code)
    if outcome is not Outcome.DELIVERED:
        # A status line only: what the endpoint says never reaches the delivery log.
        assert result.detail.split(" ")[:2] == ["HTTP", str(reply.status)]
        assert not reply.body or reply.body not in result.detail


async def test_retry_after_is_honoured_in_seconds_and_dates(
    receiver: WebhookReceiver, sender: WebhookSender
) -> None:
    receiver.script(
        "/hook",
        [
            Reply(429, {"Retry-After": "7"}),
            Reply(503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
            Reply(429),
            Reply(503, {"Retry-After": "999999999"}),
        ],
    )
    message = WebhookMessage.from_event(make_event())
    results = [await sender.deliver(receiver.url(), message) for _ in range(4)]
    assert [r.outcome for r in results] == [Outcome.RETRY] * 4
    assert results[0].retry_after == 7.0
    assert results[1].retry_after == 0.0  # a date in the past: retry now
    assert results[2].retry_after is None  # no header: the schedule decides
    assert results[3].retry_after == settings().max_retry_after_s


def test_retry_after_parsing() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Thu, 01 Jan 2026 00:01:00 GMT", now=1767225600.0) == 60.0


async def test_redirect_is_not_followed(receiver: WebhookReceiver, sender: WebhookSender) -> None:
    receiver.script("/hook", [Reply(302, {"Location": receiver.url("/elsewhere")})])
    result = await sender.deliver(receiver.url(), WebhookMessage.from_event(make_event()))
    assert result.outcome is Outcome.RETRY
    assert result.code == "webhook_redirect_refused"
    assert result.status_code == 302
    assert "elsewhere" not in result.detail
    assert receiver.at("/elsewhere") == []
    assert len(receiver.at("/hook")) == 1


async def test_timeout_is_a_retry(receiver: WebhookReceiver) -> None:
    receiver.script("/slow", [Reply(200, delay_s=3)])
    sender = WebhookSender(settings(timeout_s=0.3))
    try:
        result = await sender.deliver(
            receiver.url("/slow"), WebhookMessage.from_event(make_event())
        )
    finally:
        await sender.close()
    assert result.outcome is Outcome.RETRY
    assert result.code == "webhook_timeout"


async def test_closed_port_is_a_retry(sender: WebhookSender) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    result = await sender.deliver(url, WebhookMessage.from_event(make_event()))
    assert result.outcome is Outcome.RETRY
    assert result.code == "webhook_connect_failed"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/hook",
        "http://localhost:{port}/hook",
        "http://[::1]:{port}/hook",
        "http://[::ffff:127.0.0.1]:{port}/hook",
        "http://10.1.2.3:{port}/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:{port}/",
        "http://2130706433:{port}/hook",
        # Called global by ipaddress.is_global on Python 3.11.7:
        "http://192.0.0.192/hook",
        "http://[::ffff:0:7f00:1]:{port}/hook",
        "http://[::7f00:1]:{port}/hook",
        "http://[64:ff9b:1::7f00:1]:{port}/hook",
        "http://[fec0::1]:{port}/hook",
    ],
)
async def test_private_target_refused_before_any_connection(
    receiver: WebhookReceiver, connections: list[Any], url: str
) -> None:
    sender = WebhookSender(settings(allow_private_targets=False))
    try:
        result = await sender.deliver(
            url.format(port=receiver.port), WebhookMessage.from_event(make_event())
        )
    finally:
        await sender.close()
    assert result.outcome is Outcome.FAILED
    assert result.code == "webhook_target_refused"
    assert connections == []
    assert receiver.requests == []


async def test_connection_guard_sees_real_connections(
    receiver: WebhookReceiver, sender: WebhookSender, connections: list[Any]
) -> None:
    """The guard above would notice a connection: with private targets allowed, it does."""
    result = await sender.deliver(receiver.url(), WebhookMessage.from_event(make_event()))
    assert result.outcome is Outcome.DELIVERED
    assert connections


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost", "gopher://a"]
)
async def test_other_schemes_refused(sender: WebhookSender, url: str) -> None:
    result = await sender.deliver(url, WebhookMessage.from_event(make_event()))
    assert (result.outcome, result.code) == (Outcome.FAILED, "webhook_target_refused")


async def test_unresolvable_host_is_retryable(sender: WebhookSender) -> None:
    result = await sender.deliver(
        "http://no-such-host.invalid/hook", WebhookMessage.from_event(make_event())
    )
    assert (result.outcome, result.code) == (Outcome.RETRY, "webhook_target_unresolvable")


async def test_name_is_delivered_to_its_checked_address_with_its_host_header(
    receiver: WebhookReceiver, connections: list[Any]
) -> None:
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    sender = WebhookSender(settings(), resolver=resolver)  # private targets allowed
    message = WebhookMessage.from_event(make_event())
    try:
        result = await sender.deliver(f"http://hooks.example:{receiver.port}/hook", message)
    finally:
        await sender.close()
    assert result.outcome is Outcome.DELIVERED
    [got] = receiver.requests
    assert got.headers["host"] == f"hooks.example:{receiver.port}"
    Webhook(SECRET).verify(got.body, got.headers)
    assert asked == ["hooks.example"]
    assert {address[0] for address in connections} == {"127.0.0.1"}


@pytest.fixture
def rebinding_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """``rebind.example`` answers a public address once, then 127.0.0.1 (DNS rebinding).

    Connections to anything but loopback are refused here (and recorded), so nothing leaves
    the machine whichever address a client picks.
    """
    lookups: list[str] = []
    attempts: list[str] = []
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("rebind.example", b"rebind.example"):  # anyio asks with bytes
            return real_getaddrinfo(host, port, *args, **kwargs)
        lookups.append(host)
        answer = "93.184.216.34" if len(lookups) == 1 else "127.0.0.1"
        return real_getaddrinfo(answer, port, *args, **kwargs)

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(str(address[0]))
            if not ipaddress.ip_address(str(address[0])).is_loopback:
                raise ConnectionRefusedError(f"test: no connection to {address[0]}")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    yield attempts
    assert lookups == ["rebind.example"]  # resolved once, for the check


async def test_dns_rebinding_after_the_check_reaches_nothing_internal(
    receiver: WebhookReceiver, rebinding_dns: list[str]
) -> None:
    sender = WebhookSender(settings(allow_private_targets=False))
    try:
        result = await sender.deliver(
            f"http://rebind.example:{receiver.port}/hook", WebhookMessage.from_event(make_event())
        )
    finally:
        await sender.close()
    assert receiver.requests == []  # the loopback answer was never used
    assert rebinding_dns == ["93.184.216.34"]  # only the checked address was tried
    assert (result.outcome, result.code) == (Outcome.RETRY, "webhook_connect_failed")


def test_classify_directly() -> None:
    assert classify(201, {}, max_retry_after_s=60).outcome is Outcome.DELIVERED
    assert classify(429, {"retry-after": "600"}, max_retry_after_s=60).retry_after == 60
    redirect = classify(301, {"location": "http://10.0.0.1/x"}, max_retry_after_s=60)
    assert redirect.code == "webhook_redirect_refused"
    assert "10.0.0.1" not in redirect.detail


def test_event_data_cannot_override_the_identity() -> None:
    message = WebhookMessage.from_event(make_event(data={"video_id": "other", "frames": 1}))
    assert json.loads(message.body)["data"] == {
        "video_id": "vid-1",
        "tenant": "acme",
        "pipeline_version": "pv1",
        "frames": 1,
    }
