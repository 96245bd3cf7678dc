"""A real webhook receiver on 127.0.0.1 for the tests: records every request and answers
with scripted replies (status, headers, a delay), and can go down and come back on the same
port."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from devkit.services import free_port


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """Answers 200 unless a path has scripted replies left (consumed in order)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.requests: list[Received] = []
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Condition()
        self.in_flight = 0  # requests read but not answered yet

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, replies: Iterable[Reply | int]) -> None:
        self._scripts[path].extend(r if isinstance(r, Reply) else Reply(r) for r in replies)

    def clear_scripts(self) -> None:
        """Answer 200 to everything from now on."""
        self._scripts.clear()

    def at(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    def delivered_ids(self, path: str | None = None) -> set[str]:
        """Webhook ids answered with a 2xx: what a deduplicating receiver keeps."""
        return {
            r.webhook_id
            for r in self.requests
            if 200 <= r.status < 300 and (path is None or r.path == path)
        }

    async def wait_for(self, count: int, *, path: str | None = None, timeout_s: float = 20) -> None:
        """Until ``count`` requests (to ``path``, if given) have been answered."""

        def enough() -> bool:
            return len(self.at(path) if path else self.requests) >= count

        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(enough)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        queue = self._scripts.get(request.path)
        reply = queue.popleft() if queue else Reply()
        if reply.delay_s:
            self.in_flight += 1
            try:
                await asyncio.sleep(reply.delay_s)
            finally:
                self.in_flight -= 1
        self.requests.append(
            Received(
                path=request.path,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                status=reply.status,
            )
        )
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
