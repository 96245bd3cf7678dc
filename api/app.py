"""The progress API: per-video status, lists, live progress streams, search and health.

``create_app`` assembles a FastAPI app from the route modules (``routes_*``) over any
``CheckpointStore``; the search function, the dead-letter source and the object store of the
result documents are passed in, so the API depends on no concrete store, index or model. The
same app runs under uvicorn (``api_server``) or as a Ray Serve ingress (``api_deployment``).
"""

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from api.base import DeadLetterFn, DeleteFn, ReplayFn, SearchFn
from api.dashboard import install_dashboard
from api.dependencies import ApiContext, token_digest
from api.errors import install_error_handlers
from api.limits import RateLimit
from api.metrics import RequestMetrics
from api.models import complete_openapi
from api.progress_hub import ProgressHub
from api.routes_dead_letters import dead_letter_routes
from api.routes_events import event_routes
from api.routes_operations import operation_routes
from api.routes_results import result_routes
from api.routes_review import review_routes
from api.routes_search import search_routes
from api.routes_videos import video_routes
from checkpoint.base import CheckpointStore
from core.search import SEARCHED_KINDS
from core.stage_names import ALL
from storage.base import ObjectStore

if TYPE_CHECKING:
    from ray.serve import Deployment


def create_app(
    store: CheckpointStore,
    *,
    search: SearchFn | None = None,
    tokens: Mapping[str, str],
    dead_letters: DeadLetterFn | None = None,
    replay: ReplayFn | None = None,
    results: ObjectStore | None = None,
    delete: DeleteFn | None = None,
    on_close: Sequence[Callable[[], Awaitable[None]]] = (),
    heartbeat_s: float = 15.0,
    health_timeout_s: float = 2.0,
    max_page: int = 500,
    max_streams: int = 1000,
    max_streams_per_tenant: int = 100,
    replays_per_minute: int = 60,
    owns_store: bool = False,
    stages: Sequence[str] = ALL,
    search_kinds: Sequence[str] = SEARCHED_KINDS,
) -> FastAPI:
    """The progress API over ``store``.

    ``tokens`` maps bearer token -> tenant; with an empty mapping there is no authentication
    and every tenant is visible. With tokens, each caller sees only its own tenant's videos,
    events and search hits. Event streams share one progress subscription, at most
    ``max_streams`` of them at once (``max_streams_per_tenant`` of one tenant); a tenant
    replays at most ``replays_per_minute`` dead letters a minute. ``results`` is the object
    store the pipeline writes result documents to (``/v1/videos/{id}/result`` reads them).
    ``owns_store`` closes the store and ``results`` when the app shuts down, and ``on_close``
    runs there too (the dead-letter source's connections, say). ``stages``: the pipeline's
    stages in the order they run, ``search_kinds`` the segment kinds search finds (the
    service's own, without stages from other packages, by default).
    """

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for close in on_close:
            await close()
        if owns_store:
            await store.close()
            if results is not None:
                results.close()

    app = FastAPI(
        title="reelsense progress API",
        version="1",
        description="Per-video processing status, live progress events and text search.",
        lifespan=lifespan,
    )
    ApiContext(
        store=store,
        tenants_by_digest={token_digest(token): tenant for token, tenant in tokens.items()},
        progress=ProgressHub(
            store, max_streams=max_streams, max_streams_per_tenant=max_streams_per_tenant
        ),
        replays=RateLimit(replays_per_minute, 60.0),
        search=search,
        dead_letters=dead_letters,
        replay=replay,
        results=results,
        delete=delete,
        heartbeat_s=heartbeat_s,
        health_timeout_s=health_timeout_s,
        stages=tuple(stages),
    ).install(app)
    app.add_middleware(RequestMetrics)
    install_error_handlers(app)
    complete_openapi(app)
    install_dashboard(app)
    # The order of the schema's paths: videos and their results, the review queue, search,
    # dead letters, events, operations.
    app.include_router(video_routes(max_page))
    app.include_router(result_routes())
    app.include_router(review_routes(max_page))
    app.include_router(search_routes(search_kinds))
    app.include_router(dead_letter_routes(max_page))
    app.include_router(event_routes)
    app.include_router(operation_routes)
    return app


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
