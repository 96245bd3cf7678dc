"""Routes of dead letters: list them, replay one."""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from api.dependencies import Caller, Context
from api.errors import ApiError
from api.models import ERROR_RESPONSES, DeadLetterPage, ErrorBody, ReplayResult


def dead_letter_routes(max_page: int) -> APIRouter:
    """``max_page``: the longest list a caller may ask for."""
    router = APIRouter(tags=["operations"], responses=ERROR_RESPONSES)

    @router.get("/v1/dead-letters")
    async def list_dead_letters(
        caller: Caller, context: Context, limit: Annotated[int, Query(ge=1, le=max_page)] = 50
    ) -> DeadLetterPage:
        """Upload events and webhooks that failed for good, newest first."""
        if context.dead_letters is None:
            raise _unavailable()
        items = await context.dead_letters(caller, limit)
        return DeadLetterPage(items=[d for d in items if caller is None or d.tenant == caller])

    @router.post(
        "/v1/dead-letters/{letter_id}/replay",
        responses={429: {"model": ErrorBody, "description": "Too many replays"}},
    )
    async def replay_dead_letter(
        caller: Caller,
        context: Context,
        letter_id: Annotated[str, Path(min_length=1, max_length=256)],
    ) -> ReplayResult:
        """Replay one dead letter: an upload event goes back on the uploads topic, a webhook
        is delivered once more with the same `webhook-id`. 429 (`too_many_replays`, with
        Retry-After) beyond the tenant's replays a minute."""
        if context.replay is None:
            raise _unavailable()
        limit = context.replays
        wait = limit.take(caller or "")
        if wait is not None:
            raise ApiError(
                429,
                "too_many_replays",
                f"at most {limit.count} replays a minute",
                {"Retry-After": limit.retry_after(wait)},
            )
        result = await context.replay(letter_id, caller)
        if result is None:
            raise ApiError(404, "not_found", f"no dead letter {letter_id!r}")
        return result

    return router


def _unavailable() -> ApiError:
    return ApiError(503, "dead_letters_unavailable", "dead letters are not configured")
