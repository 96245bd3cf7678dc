"""Routes of videos: one video's status, and pages of videos newest first."""

from typing import Annotated

from fastapi import APIRouter, Query

from api.dependencies import Caller, Context, Video, scope_tenant
from api.errors import ApiError
from api.models import ERROR_RESPONSES, DeletionAccepted, ErrorBody, VideoPage, shown
from checkpoint.base import VideoState, VideoStatus


def video_routes(max_page: int) -> APIRouter:
    """``max_page``: the largest page a caller may ask for."""
    router = APIRouter(tags=["videos"])

    @router.get("/v1/videos/{video_id}", responses=ERROR_RESPONSES)
    async def get_video(video: Video) -> VideoStatus:
        """The processing status of one video."""
        return video

    @router.delete(
        "/v1/videos/{video_id}",
        status_code=202,
        responses={
            **ERROR_RESPONSES,
            503: {"model": ErrorBody, "description": "Deletion is not available here"},
        },
    )
    async def delete_video(video: Video, context: Context) -> DeletionAccepted:
        """Take a video down: its results, thumbnails, search rows and record are removed
        (the record stays as a ``deleted`` tombstone), an attempt under way is stopped, and
        its tenant gets a ``video.deleted`` webhook. Accepted at once; done in the order of
        the video's events, through the upload topic; gone from disk within
        ``storage.deletion_max_s``."""
        if context.delete is None:
            raise ApiError(503, "deletion_unavailable", "this API cannot delete videos")
        where = await context.delete(video.video_id, video.tenant)
        return DeletionAccepted(video_id=video.video_id, event=where)

    @router.get(
        "/v1/videos",
        responses={**ERROR_RESPONSES, 400: {"model": ErrorBody, "description": "Unknown cursor"}},
    )
    async def list_videos(
        *,
        caller: Caller,
        context: Context,
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
        items, next_cursor = await context.store.list(
            status=status, tenant=scope_tenant(caller, tenant), limit=limit, cursor=cursor
        )
        return VideoPage(items=[shown(item) for item in items], next_cursor=next_cursor)

    return router
