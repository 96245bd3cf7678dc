"""Routes of the review queue: the videos the review stage flagged, oldest first, a reviewer's
verdict on one, and the verdicts a video has had."""

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query

from api.dependencies import Caller, Context, Video, scope_tenant
from api.errors import ApiError
from api.models import ERROR_RESPONSES, ErrorBody
from api.review_models import (
    QueuedDecision,
    ReviewHistory,
    ReviewQueueItem,
    ReviewQueuePage,
    ReviewVerdict,
    VerdictRequest,
)
from checkpoint.base import REVIEW_CURSOR_PATTERN, ReviewItem
from checkpoint.errors import NotInReviewQueue, UnknownVideo, VerdictGiven

_VERDICT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    400: {
        "model": ErrorBody,
        "description": "The body cannot be read as JSON text (not UTF-8): `http_error`.",
    },
    409: {
        "model": ErrorBody,
        "description": "The video is not in the review queue (`not_in_review_queue`: not "
        "done, or done with the decision `pass` or none), or its pipeline version has a "
        "verdict already (`verdict_given`).",
    },
}


def review_routes(max_page: int) -> APIRouter:
    """``max_page``: the largest page a caller may ask for."""
    router = APIRouter(tags=["review"])

    @router.get("/v1/review", responses=ERROR_RESPONSES)
    async def list_review_queue(
        *,
        caller: Caller,
        context: Context,
        decision: Annotated[
            QueuedDecision,
            Query(description="The queue: videos the review stage sent to `review` or `block`."),
        ],
        tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=max_page)] = 50,
        cursor: Annotated[
            str | None,
            Query(
                pattern=REVIEW_CURSOR_PATTERN,
                description="The `next_cursor` of an earlier page.",
            ),
        ] = None,
    ) -> ReviewQueuePage:
        """The done videos the review stage flagged with ``decision`` that wait for a
        reviewer's verdict, oldest done first, each with its categories' scores and the link
        to its result, where the evidence is. A video leaves the queue with its verdict, when
        it is deleted, and when it is processed again (a new pipeline version puts it back by
        its new decision). Always the token's tenant when authentication is on. Follow
        ``next_cursor`` for the next page."""
        items, next_cursor = await context.store.reviews.page(
            tenant=scope_tenant(caller, tenant), decision=decision, limit=limit, cursor=cursor
        )
        return ReviewQueuePage(items=[_shown(item) for item in items], next_cursor=next_cursor)

    @router.post("/v1/review/{video_id}", responses=_VERDICT_RESPONSES)
    async def give_verdict(video: Video, context: Context, body: VerdictRequest) -> ReviewVerdict:
        """A reviewer's verdict on a video in the review queue: recorded on the video, for
        its current pipeline version, and appended to the audit stream (the store's
        `review:audit`), in one atomic step that takes the video out of the queue. One
        verdict per pipeline version: a second is a 409 `verdict_given`; a video that is not
        in the queue (not done, passed, never reviewed) is a 409 `not_in_review_queue`."""
        try:
            given = await context.store.reviews.give_verdict(
                video.video_id,
                tenant=video.tenant,
                verdict=body.verdict,
                reviewer=body.reviewer,
                note=body.note or None,
            )
        except UnknownVideo as exc:  # gone since it was read
            raise ApiError(404, "not_found", f"no video {video.video_id!r}") from exc
        except (NotInReviewQueue, VerdictGiven) as exc:
            raise ApiError(409, exc.code, exc.message) from exc
        return ReviewVerdict.model_validate(given)

    @router.get("/v1/review/{video_id}/history", responses=ERROR_RESPONSES)
    async def review_history(video: Video, context: Context) -> ReviewHistory:
        """The verdicts given for a video, oldest first, one per pipeline version at most,
        as its record keeps them (as long as the record is kept; the audit stream keeps
        them for good)."""
        verdicts = await context.store.reviews.verdicts(video.video_id)
        return ReviewHistory(
            video_id=video.video_id,
            verdicts=[ReviewVerdict.model_validate(given) for given in verdicts],
        )

    return router


def _shown(item: ReviewItem) -> ReviewQueueItem:
    return ReviewQueueItem.model_validate(
        {
            "video_id": item.video_id,
            "tenant": item.tenant,
            "decision": item.review.decision,
            "done_at": item.done_at,
            "pipeline_version": item.pipeline_version,
            "categories": {name: dict(found) for name, found in item.review.categories.items()},
            "result": f"/v1/videos/{quote(item.video_id, safe='')}/result",
        }
    )
