"""The search route: frames whose text is nearest to a query."""

from typing import Annotated

from fastapi import APIRouter, Query

from api.dependencies import Caller, Context, scope_tenant
from api.errors import ApiError
from api.models import ERROR_RESPONSES, SearchResult, SearchResults

search_routes = APIRouter(tags=["search"])


@search_routes.get("/v1/search", responses=ERROR_RESPONSES)
async def search_frames(
    caller: Caller,
    context: Context,
    q: Annotated[str, Query(min_length=1, max_length=1000, pattern=r"\S")],
    k: Annotated[int, Query(ge=1, le=100)] = 10,
    tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> SearchResults:
    """Frames whose text (OCR and captions) is nearest to ``q``."""
    if not q.strip():
        raise ApiError(422, "invalid_request", "q must not be blank")
    if context.search is None:
        raise ApiError(503, "search_unavailable", "search is not configured")
    scoped = scope_tenant(caller, tenant)
    hits = await context.search(q, k, scoped)
    # The index filters by tenant; checking again costs nothing and guards isolation.
    kept = [h for h in hits if scoped is None or h.tenant == scoped][:k]
    return SearchResults(query=q, k=k, hits=[SearchResult.model_validate(h) for h in kept])
