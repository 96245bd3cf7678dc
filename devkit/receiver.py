"""A small webhook receiver on 127.0.0.1 that verifies Standard Webhooks signatures.

``reelsense demo`` shows with it what a business system receives; tests use it as the far end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from devkit.services import free_port


@dataclass
class ReceivedWebhook:
    webhook_id: str
    type: str
    video_id: str
    verified: bool
    body: dict[str, Any]


@dataclass
class WebhookReceiver:
    """Accepts POSTs at ``/hooks``; records every delivery, verified or not."""

    secret: str
    host: str = "127.0.0.1"
    received: list[ReceivedWebhook] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hooks"

    async def start(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_post("/hooks", self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = self.port or free_port()
        await web.TCPSite(self._runner, self.host, self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            Webhook(self.secret).verify(body, dict(request.headers))
            verified = True
        except WebhookVerificationError:
            verified = False
        payload = json.loads(body or b"{}")
        data = payload.get("data", {})
        self.received.append(
            ReceivedWebhook(
                webhook_id=request.headers.get("webhook-id", ""),
                type=str(payload.get("type", "")),
                video_id=str(data.get("video_id", "")),
                verified=verified,
                body=payload,
            )
        )
        return web.Response(status=204 if verified else 401)

    def unique_ids(self) -> set[str]:
        return {hook.webhook_id for hook in self.received if hook.verified}
