"""The progress API: per-video status, lists, live progress streams, search and health.

``create_app`` builds a FastAPI app over any ``CheckpointStore``; the search function and the
dead-letter source are passed in, so the API depends on no concrete store, index or model.
The same app runs under uvicorn (``serve_api``) or as a Ray Serve ingress (``api_deployment``).
"""

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

import uvicorn
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.dashboard import install_dashboard
from api.dead_letters import ReplayResult
from api.models import (
    ERROR_RESPONSES,
    EVENT_STREAM_OPENAPI,
    STREAM_ERROR_RESPONSES,
    DeadLetter,
    DeadLetterPage,
    ErrorBody,
    ErrorDetail,
    Health,
    ProgressUpdate,
    SearchResult,
    SearchResults,
    VideoPage,
    add_event_schemas,
)
from checkpoint.base import CheckpointStore, ProgressEvent, VideoState, VideoStatus
from core.errors import PermanentError, ReelsenseError, RetryableError
from core.records import SearchHit

if TYPE_CHECKING:
    from ray.serve import Deployment

SearchFn = Callable[[str, int, str | None], Awaitable[list[SearchHit]]]
"""(query, k, tenant or None for all) -> nearest hits. Must not block the event loop."""
DeadLetterFn = Callable[[str | None, int], Awaitable[Sequence[DeadLetter]]]
"""(tenant or None for all, limit) -> newest dead letters."""
ReplayFn = Callable[[str, str | None], Awaitable[ReplayResult | None]]
"""(dead letter id, tenant or None for all) -> what the replay did; None: no such letter."""

TERMINAL = frozenset({VideoState.DONE, VideoState.FAILED})
_HEALTH_PROBE_ID = "healthz-probe"  # any id: reading a missing record proves the store answers

API_REQUESTS = Counter(
    "reelsense_api_requests_total",
    "HTTP requests answered by the progress API.",
    ["route", "method", "status"],
)
API_STREAMS = Gauge("reelsense_api_event_streams", "Open server-sent event streams.")


class ApiError(Exception):
    """An answer other than success, rendered as ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def _digest(token: str) -> bytes:
    # Tokens are looked up by digest so that lookup time says nothing about a token's prefix.
    return hashlib.sha256(token.encode()).digest()


def create_app(
    store: CheckpointStore,
    *,
    search: SearchFn | None = None,
    tokens: Mapping[str, str],
    dead_letters: DeadLetterFn | None = None,
    replay: ReplayFn | None = None,
    on_close: Sequence[Callable[[], Awaitable[None]]] = (),
    heartbeat_s: float = 15.0,
    health_timeout_s: float = 2.0,
    max_page: int = 500,
    owns_store: bool = False,
) -> FastAPI:
    """The progress API over ``store``.

    ``tokens`` maps bearer token -> tenant; with an empty mapping there is no authentication
    and every tenant is visible. With tokens, each caller sees only its own tenant's videos,
    events and search hits. ``owns_store`` closes the store when the app shuts down, and
    ``on_close`` runs there too (the dead-letter source's connections, say).
    """
    tenants_by_digest = {_digest(token): tenant for token, tenant in tokens.items()}
    bearer = HTTPBearer(auto_error=False, description="A tenant's API token.")

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for close in on_close:
            await close()
        if owns_store:
            await store.close()

    app = FastAPI(
        title="reelsense progress API",
        version="1",
        description="Per-video processing status, live progress events and text search.",
        lifespan=lifespan,
    )
    app.add_middleware(_RequestMetrics)
    _install_error_handlers(app)
    add_event_schemas(app)
    install_dashboard(app)

    async def caller_tenant(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> str | None:
        """The caller's tenant; None when authentication is off (every tenant visible)."""
        if not tenants_by_digest:
            return None
        if credentials is None:
            raise ApiError(401, "unauthorized", "a bearer token is required")
        tenant = tenants_by_digest.get(_digest(credentials.credentials))
        if tenant is None:
            raise ApiError(401, "unauthorized", "the bearer token is not valid")
        return tenant

    Caller = Annotated[str | None, Depends(caller_tenant)]

    def scope_tenant(caller: str | None, asked: str | None) -> str | None:
        if caller is not None and asked is not None and asked != caller:
            raise ApiError(403, "tenant_forbidden", "the token does not grant that tenant")
        return caller if caller is not None else asked

    async def visible_video(
        video_id: Annotated[str, Path(min_length=1, max_length=128)], caller: Caller
    ) -> VideoStatus:
        status = await store.get(video_id)
        # Another tenant's video answers exactly like a missing one: ids must not leak.
        if status is None or (caller is not None and status.tenant != caller):
            raise ApiError(404, "not_found", f"no video {video_id!r}")
        return status

    Video = Annotated[VideoStatus, Depends(visible_video)]

    @app.get("/v1/videos/{video_id}", responses=ERROR_RESPONSES, tags=["videos"])
    async def get_video(video: Video) -> VideoStatus:
        """The processing status of one video."""
        return video

    @app.get(
        "/v1/videos",
        responses={**ERROR_RESPONSES, 400: {"model": ErrorBody, "description": "Unknown cursor"}},
        tags=["videos"],
    )
    async def list_videos(
        caller: Caller,
        status: VideoState | None = None,
        tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=max_page)] = 50,
        cursor: Annotated[
            str | None,
            Query(
                max_length=512,
                description="An opaque `next_cursor` from an earlier page; an unknown one "
                "is a 400 `invalid_cursor`.",
            ),
        ] = None,
    ) -> VideoPage:
        """Videos newest first, optionally by status and tenant (always the token's tenant
        when authentication is on). Follow ``next_cursor`` for the next page."""
        items, next_cursor = await store.list(
            status=status, tenant=scope_tenant(caller, tenant), limit=limit, cursor=cursor
        )
        return VideoPage(items=items, next_cursor=next_cursor)

    @app.get("/v1/search", responses=ERROR_RESPONSES, tags=["search"])
    async def search_frames(
        caller: Caller,
        q: Annotated[str, Query(min_length=1, max_length=1000, pattern=r"\S")],
        k: Annotated[int, Query(ge=1, le=100)] = 10,
        tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    ) -> SearchResults:
        """Frames whose text (OCR and captions) is nearest to ``q``."""
        if not q.strip():
            raise ApiError(422, "invalid_request", "q must not be blank")
        if search is None:
            raise ApiError(503, "search_unavailable", "search is not configured")
        scoped = scope_tenant(caller, tenant)
        hits = await search(q, k, scoped)
        # The index filters by tenant; checking again costs nothing and guards isolation.
        kept = [h for h in hits if scoped is None or h.tenant == scoped][:k]
        return SearchResults(query=q, k=k, hits=[SearchResult.from_hit(h) for h in kept])

    @app.get("/v1/dead-letters", responses=ERROR_RESPONSES, tags=["operations"])
    async def list_dead_letters(
        caller: Caller, limit: Annotated[int, Query(ge=1, le=max_page)] = 50
    ) -> DeadLetterPage:
        """Upload events and webhooks that failed for good, newest first."""
        if dead_letters is None:
            raise ApiError(503, "dead_letters_unavailable", "dead letters are not configured")
        items = await dead_letters(caller, limit)
        return DeadLetterPage(items=[d for d in items if caller is None or d.tenant == caller])

    @app.post("/v1/dead-letters/{letter_id}/replay", responses=ERROR_RESPONSES, tags=["operations"])
    async def replay_dead_letter(
        caller: Caller, letter_id: Annotated[str, Path(min_length=1, max_length=256)]
    ) -> ReplayResult:
        """Replay one dead letter: an upload event goes back on the uploads topic, a webhook
        is delivered once more with the same `webhook-id`."""
        if replay is None:
            raise ApiError(503, "dead_letters_unavailable", "dead letters are not configured")
        result = await replay(letter_id, caller)
        if result is None:
            raise ApiError(404, "not_found", f"no dead letter {letter_id!r}")
        return result

    @app.get(
        "/v1/events",
        response_class=EventSourceResponse,
        responses=STREAM_ERROR_RESPONSES,
        openapi_extra=EVENT_STREAM_OPENAPI,
        tags=["events"],
    )
    async def all_events(
        caller: Caller,
        tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    ) -> AsyncIterator[ServerSentEvent]:
        """Live `progress` events of every visible video, from now on. A `: heartbeat`
        comment arrives whenever nothing else did for a while."""
        scoped = scope_tenant(caller, tenant)
        async for item in _event_stream(
            store, lambda e: scoped is None or e.tenant == scoped, heartbeat_s, None
        ):
            yield item

    @app.get(
        "/v1/videos/{video_id}/events",
        response_class=EventSourceResponse,
        responses=STREAM_ERROR_RESPONSES,
        openapi_extra=EVENT_STREAM_OPENAPI,
        tags=["events"],
    )
    async def video_events(video: Video) -> AsyncIterator[ServerSentEvent]:
        """A `status` event with the current status, then live `progress` events of the
        video; after it reaches done or failed, a final `status` event and the end."""
        async for item in _event_stream(
            store, lambda e: e.video_id == video.video_id, heartbeat_s, video
        ):
            yield item

    @app.get("/healthz", responses={503: {"model": ErrorBody}}, tags=["operations"])
    async def healthz() -> Health:
        """200 when the checkpoint store answers; 503 otherwise."""
        try:
            await asyncio.wait_for(store.get(_HEALTH_PROBE_ID), timeout=health_timeout_s)
        except TimeoutError:
            raise ApiError(503, "store_unavailable", "the checkpoint store timed out") from None
        except ReelsenseError as exc:
            raise ApiError(503, "store_unavailable", f"{exc.code}: {exc.message}") from None
        except OSError as exc:  # an adapter that let a socket error through
            raise ApiError(503, "store_unavailable", str(exc)) from None
        return Health()

    @app.get("/metrics", response_class=Response, tags=["operations"])
    async def metrics() -> Response:
        """Prometheus text exposition of this process's default registry."""
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return app


async def _event_stream(
    store: CheckpointStore,
    wanted: Callable[[ProgressEvent], bool],
    heartbeat_s: float,
    video: VideoStatus | None,
) -> AsyncIterator[ServerSentEvent]:
    """Progress events that pass ``wanted``, with heartbeats. With ``video`` the stream is
    that video's: it opens with its status and ends once the video is done or failed."""
    queue: asyncio.Queue[ProgressEvent | BaseException] = asyncio.Queue(maxsize=1024)

    async def pump() -> None:
        # A separate task reads the store so that waiting for a heartbeat never cancels the
        # store's iterator in the middle of a read.
        events = store.progress()
        try:
            async for event in events:
                if wanted(event):
                    await queue.put(event)
        except Exception as exc:
            await queue.put(exc)
        finally:
            closing = getattr(events, "aclose", None)
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing()

    task = asyncio.create_task(pump(), name="api-progress-pump")
    API_STREAMS.inc()
    try:
        if video is not None:
            # Subscribe first, then read: an event between the two is not lost. A finish
            # before the subscription took hold is caught by the re-read at each heartbeat.
            await asyncio.sleep(0)
            current = await store.get(video.video_id) or video
            yield _status_event(current)
            if current.status in TERMINAL:
                return
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=heartbeat_s)
            except TimeoutError:
                yield ServerSentEvent(comment="heartbeat")
                if video is not None:
                    current = await store.get(video.video_id) or video
                    if current.status in TERMINAL:
                        yield _status_event(current)
                        return
                continue
            if isinstance(item, BaseException):
                code = item.code if isinstance(item, ReelsenseError) else "stream_failed"
                yield ServerSentEvent(event="error", data=ErrorDetail(code=code, message=str(item)))
                return
            yield ServerSentEvent(event="progress", data=ProgressUpdate.from_event(item))
            if video is not None and item.status in TERMINAL:
                final = await store.get(video.video_id)
                if final is not None:
                    yield _status_event(final)
                return
    finally:
        API_STREAMS.dec()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _status_event(status: VideoStatus) -> ServerSentEvent:
    return ServerSentEvent(event="status", data=status)


def _install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as ``{"error": {"code", "message"}}``."""

    async def api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.code, exc.message, headers)

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), exc.headers)

    async def invalid_request(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        return error_response(422, "invalid_request", problems)

    async def retryable(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RetryableError)
        after = exc.retry_after
        headers = {"Retry-After": str(max(1, round(after)))} if after is not None else None
        return error_response(503, exc.code, exc.message, headers)

    async def permanent(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, PermanentError)
        return error_response(400, exc.code, exc.message)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(RetryableError, retryable)
    app.add_exception_handler(PermanentError, permanent)


class _RequestMetrics:
    """Counts answers by route template (not raw path, which would explode label values)."""

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


def api_server(app: ASGIApp, host: str, port: int) -> uvicorn.Server:
    """A uvicorn server for ``app``; ``await server.serve()`` runs it in this event loop,
    ``server.should_exit = True`` stops it."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        # Open event streams would otherwise hold a shutdown forever.
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


async def serve_api(app: ASGIApp, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn in this process until cancelled (the path without Ray)."""
    await api_server(app, host, port).serve()


def api_deployment(
    build_app: Callable[[], ASGIApp], *, num_replicas: int = 1, num_cpus: float = 0.25
) -> "Deployment":
    """A Ray Serve ingress deployment around the app that ``build_app`` returns.

    ``build_app`` (a function, closure or ``functools.partial``) runs inside each replica, so
    the store and its connections are made there and never pickled. Bind and run it with
    ``serve.run(api_deployment(...).bind(), route_prefix="/")``.
    """
    from ray import serve

    def build() -> ASGIApp:
        # Serve calls its argument only when it is a plain function; anything else (a
        # partial, a callable object) it would take for the ASGI app itself.
        return build_app()

    return serve.deployment(
        name="reelsense-api",
        num_replicas=num_replicas,
        ray_actor_options={"num_cpus": num_cpus},
    )(serve.ingress(build)())
