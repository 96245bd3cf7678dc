"""What the routes share: the app's sources, the caller's tenant and the videos it may see.

One ``ApiContext`` per app lives in ``app.state``; routes reach it through FastAPI
dependencies, so the route modules hold no per-app state of their own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, FastAPI, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.base import DeadLetterFn, DeleteFn, ReplayFn, SearchFn
from api.documents import DocumentCache
from api.errors import ApiError
from api.limits import RateLimit
from api.models import shown
from api.progress_hub import ProgressHub
from checkpoint.base import CheckpointStore, VideoStatus
from core.stage_names import ALL
from storage.base import ObjectStore

_BEARER = HTTPBearer(auto_error=False, description="A tenant's API token.")


def token_digest(token: str) -> bytes:
    # Tokens are looked up by digest so that lookup time says nothing about a token's prefix.
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class ApiContext:
    """The store and sources one app answers from, its one progress subscription, and the
    tenant of each token digest (empty: no authentication, every tenant visible).
    ``results`` is the object store holding the result documents (None: results unavailable);
    ``documents`` keeps them parsed, once per stored version.
    """

    store: CheckpointStore
    tenants_by_digest: Mapping[bytes, str]
    progress: ProgressHub
    replays: RateLimit
    search: SearchFn | None = None
    dead_letters: DeadLetterFn | None = None
    replay: ReplayFn | None = None
    results: ObjectStore | None = None
    delete: DeleteFn | None = None
    heartbeat_s: float = 15.0
    health_timeout_s: float = 2.0
    documents: DocumentCache = field(default_factory=DocumentCache)
    stages: tuple[str, ...] = ALL  # the pipeline's stages, in the order they run

    def install(self, app: FastAPI) -> None:
        app.state.api_context = self


def api_context(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.api_context
    return context


Context = Annotated[ApiContext, Depends(api_context)]


async def caller_tenant(
    context: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> str | None:
    """The caller's tenant; None when authentication is off (every tenant visible)."""
    if not context.tenants_by_digest:
        return None
    if credentials is None:
        raise ApiError(401, "unauthorized", "a bearer token is required")
    tenant = context.tenants_by_digest.get(token_digest(credentials.credentials))
    if tenant is None:
        raise ApiError(401, "unauthorized", "the bearer token is not valid")
    return tenant


Caller = Annotated[str | None, Depends(caller_tenant)]


def scope_tenant(caller: str | None, asked: str | None) -> str | None:
    """The tenant a request reads: the caller's own, or the one asked for when
    authentication is off. Asking for another tenant's is a 403."""
    if caller is not None and asked is not None and asked != caller:
        raise ApiError(403, "tenant_forbidden", "the token does not grant that tenant")
    return caller if caller is not None else asked


async def visible_video(
    video_id: Annotated[str, Path(min_length=1, max_length=128)],
    caller: Caller,
    context: Context,
) -> VideoStatus:
    """The video in the path, when the caller may see it."""
    status = await context.store.get(video_id)
    # Another tenant's video answers exactly like a missing one: ids must not leak.
    if status is None or (caller is not None and status.tenant != caller):
        raise ApiError(404, "not_found", f"no video {video_id!r}")
    return shown(status)


Video = Annotated[VideoStatus, Depends(visible_video)]
