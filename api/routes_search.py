"""The search route: places in videos whose text, speech or descriptions match a query."""

from collections.abc import Sequence
from typing import Annotated, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query

from api.dependencies import Caller, Context, scope_tenant
from api.errors import ApiError
from api.models import ERROR_RESPONSES, SearchResult, SearchResults
from core.search import SEARCHED_KINDS, Method, SearchFilter, SegmentHit

_ENDING, _STARTING = "Places ending after this.", "Places starting before this."


def search_routes(kinds: Sequence[str] = SEARCHED_KINDS) -> APIRouter:
    """The search route, its ``kind`` filter limited to ``kinds``: the segment kinds this
    pipeline's search finds (the service's own, and those its video stages make searchable),
    so the served schema names them and another kind is refused before the index is asked."""
    router = APIRouter(tags=["search"])
    kind_names = Literal[tuple(kinds)]  # type: ignore[valid-type]
    kind_filter = Annotated[
        list[kind_names] | None,  # type: ignore[valid-type]
        Query(description=f"Limit to these kinds: {', '.join(kinds)} (repeatable)."),
    ]

    @router.get("/v1/search", responses=ERROR_RESPONSES)
    async def search_segments(
        caller: Caller,
        context: Context,
        *,
        q: Annotated[str, Query(min_length=1, max_length=1000, pattern=r"\S")],
        k: Annotated[int, Query(ge=1, le=100)] = 10,
        tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        video: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
        kind: kind_filter = None,
        from_s: Annotated[
            float | None, Query(ge=0, description="Places ending after this.")
        ] = None,
        to_s: Annotated[
            float | None, Query(ge=0, description="Places starting before this.")
        ] = None,
        method: Annotated[Method, Query(description="hybrid, or one of its parts.")] = "hybrid",
    ) -> SearchResults:
        """Places in videos that match ``q``: on-screen text spans, speech and shot
        descriptions, by meaning (multilingual embeddings) and by words (full text), and with
        an image embedding model frames by what they show, fused by rank. Overlapping matches
        of one video are one hit, with the kinds that matched."""
        if not q.strip():
            raise ApiError(422, "invalid_request", "q must not be blank")
        if context.search is None:
            raise ApiError(503, "search_unavailable", "search is not configured")
        scoped = scope_tenant(caller, tenant)
        where = SearchFilter(scoped, video, tuple(sorted(set(kind or ()))), from_s, to_s)
        hits = await context.search(q, k, where, method)
        # The index filters by tenant; checking again costs nothing and guards isolation.
        kept = [_result(h) for h in hits if scoped is None or h.tenant == scoped][:k]
        return SearchResults(query=q, k=k, method=method, hits=kept)

    return router


def _result(hit: SegmentHit) -> SearchResult:
    result = SearchResult.model_validate(hit)
    if hit.shot is None:
        return result
    link = f"/v1/videos/{quote(hit.video_id, safe='')}/shots/{hit.shot}/thumbnail.jpg"
    return result.model_copy(update={"thumbnail": link})
