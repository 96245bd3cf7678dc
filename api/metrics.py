"""Prometheus metrics of the progress API: answers by route, open event streams."""

from prometheus_client import Counter, Gauge
from starlette.types import ASGIApp, Message, Receive, Scope, Send

API_REQUESTS = Counter(
    "reelsense_api_requests_total",
    "HTTP requests answered by the progress API.",
    ["route", "method", "status"],
)
API_STREAMS = Gauge("reelsense_api_event_streams", "Open server-sent event streams.")


class RequestMetrics:
    """ASGI middleware that counts answers by route template (not raw path, which would
    explode label values)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            API_REQUESTS.labels(route, scope["method"], str(status)).inc()
