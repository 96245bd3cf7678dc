"""A webhook receiver on 127.0.0.1: the far end of the service's webhooks.

It records every request, checks its Standard Webhooks signature when given the secret, and
answers with scripted replies (status, headers, a delay) where a test asks for them. It can go
down and come back on the same port. ``reelsense demo`` shows with it what a business system
receives; the tests and the crash soak use it as the business system.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from devkit.services import free_port


@dataclass(frozen=True)
class Reply:
    """What the receiver answers to one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    delay_s: float = 0.0


@dataclass(frozen=True)
class ReceivedWebhook:
    """One request as it arrived, and what the receiver answered."""

    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    status: int
    verified: bool  # the signature matched the receiver's secret
    received_at: float = field(default_factory=time.time)  # when it arrived (epoch seconds)

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")

    @cached_property
    def payload(self) -> dict[str, Any]:
        """The body as JSON; empty when it is not a JSON object."""
        try:
            loaded = json.loads(self.body or b"{}")
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}

    @property
    def type(self) -> str:
        return str(self.payload.get("type", ""))

    @property
    def video_id(self) -> str:
        data = self.payload.get("data")
        return str(data.get("video_id", "")) if isinstance(data, dict) else ""


class WebhookReceiver:
    """Answers every path: a scripted reply while the path has some left (in order), else 401
    to a bad signature when a ``secret`` is set, else 200."""

    def __init__(self, secret: str | None = None, *, port: int | None = None) -> None:
        self.secret = secret
        self.port = port or free_port()
        self.requests: list[ReceivedWebhook] = []
        self.in_flight = 0  # requests read but not answered yet
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Condition()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, replies: Iterable[Reply | int]) -> None:
        self._scripts[path].extend(r if isinstance(r, Reply) else Reply(r) for r in replies)

    def clear_scripts(self) -> None:
        """Answer as unscripted to everything from now on."""
        self._scripts.clear()

    def at(self, path: str) -> list[ReceivedWebhook]:
        return [r for r in self.requests if r.path == path]

    def delivered_ids(self, path: str | None = None) -> set[str]:
        """Webhook ids answered with a 2xx: what a deduplicating receiver keeps."""
        return {
            r.webhook_id
            for r in self.requests
            if 200 <= r.status < 300 and (path is None or r.path == path)
        }

    def unique_ids(self) -> set[str]:
        """Ids of the verified deliveries."""
        return {r.webhook_id for r in self.requests if r.verified}

    def videos(self, event_type: str = "video.done") -> set[str]:
        """Videos with at least one ``event_type`` webhook."""
        return {r.video_id for r in self.requests if r.type == event_type}

    async def wait_for(self, count: int, *, path: str | None = None, timeout_s: float = 20) -> None:
        """Until ``count`` requests (to ``path``, if given) have been answered; TimeoutError
        if they have not in time."""

        def enough() -> bool:
            return len(self.at(path) if path else self.requests) >= count

        await self._wait(enough, timeout_s)

    async def wait_for_videos(
        self, video_ids: Collection[str], *, event_type: str = "video.done", timeout_s: float = 60
    ) -> bool:
        """Until each of ``video_ids`` has an ``event_type`` webhook; False if not in time."""

        def arrived() -> bool:
            return set(video_ids) <= self.videos(event_type)

        with contextlib.suppress(TimeoutError):
            await self._wait(arrived, timeout_s)
        return arrived()

    async def _wait(self, condition: Callable[[], bool], timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(condition)

    def _verified(self, body: bytes, headers: dict[str, str]) -> bool:
        if self.secret is None:
            return False
        try:
            Webhook(self.secret).verify(body, headers, json_parse=False)
        except (WebhookVerificationError, ValueError):  # ValueError: malformed headers, body
            return False
        return True

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified = self._verified(body, headers)
        queue = self._scripts.get(request.path)
        if queue:
            reply = queue.popleft()
        else:
            reply = Reply(401 if self.secret is not None and not verified else 200)
        if reply.delay_s:
            self.in_flight += 1
            try:
                await asyncio.sleep(reply.delay_s)
            finally:
                self.in_flight -= 1
        self.requests.append(ReceivedWebhook(request.path, headers, body, reply.status, verified))
        async with self._arrived:
            self._arrived.notify_all()
        return web.Response(status=reply.status, headers=reply.headers, text=reply.body)

    async def start(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        return self

    async def stop(self) -> None:
        """Close the port: connections are refused until ``start()`` again."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> WebhookReceiver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
