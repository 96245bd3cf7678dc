"""Routes of videos: one video's status and result, and pages of videos newest first."""

import asyncio
import hashlib
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response

from api.dependencies import Caller, Context, Video, scope_tenant
from api.errors import ApiError
from api.models import (
    ERROR_RESPONSES,
    ErrorBody,
    FrameText,
    ProbeFacts,
    ResultVideo,
    ScreenText,
    VideoPage,
    VideoResultDocument,
)
from checkpoint.base import VideoState, VideoStatus
from core.records import Frame
from core.spans import text_spans
from core.urls import redact_url
from sinks.object_store import document_key

# Part of every result's ETag: change it when the same document gets another rendering.
_RESULT_RENDERING = b"video-result/1"

RESULT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    304: {"description": "Not modified: `If-None-Match` names the current `ETag`. No body."},
    404: {
        "model": ErrorBody,
        "description": "No such video (`not_found`), or the video is done but its result "
        "document is missing from the object store (`result_missing`).",
    },
    409: {"model": ErrorBody, "description": "The video is not done (`result_not_ready`)."},
}


def video_routes(max_page: int) -> APIRouter:
    """``max_page``: the largest page a caller may ask for."""
    router = APIRouter(tags=["videos"])

    @router.get("/v1/videos/{video_id}", responses=ERROR_RESPONSES)
    async def get_video(video: Video) -> VideoStatus:
        """The processing status of one video."""
        return video

    @router.get(
        "/v1/videos/{video_id}/result",
        response_model=VideoResultDocument,
        responses=RESULT_RESPONSES,
    )
    async def get_result(
        video: Video,
        context: Context,
        frames: Annotated[
            bool, Query(description="Include each sample's OCR lines (large for long videos).")
        ] = False,
        if_none_match: Annotated[str | None, Header(max_length=1024)] = None,
    ) -> Response:
        """What the pipeline found in a done video: its on-screen text as spans over time,
        and with ``frames=true`` each sample's OCR lines.

        A video that is not done yet is a 409 ``result_not_ready``. A done video whose result
        document is missing from the object store (removed there, or the API reads another
        store than the pipeline writes) is a 404 ``result_missing``. The answer carries a
        strong ``ETag``; a request whose ``If-None-Match`` names it gets a 304, no body.
        """
        if video.status is not VideoState.DONE:
            raise ApiError(
                409,
                "result_not_ready",
                f"video {video.video_id!r} is {video.status.value}, not done",
            )
        if context.results is None:
            raise ApiError(503, "results_unavailable", "no result store is configured")
        key = document_key(video.tenant, video.video_id, video.pipeline_version)
        data = await asyncio.to_thread(context.results.get_bytes, key)
        if data is None:
            raise ApiError(
                404,
                "result_missing",
                f"video {video.video_id!r} is done, but its result (pipeline version "
                f"{video.pipeline_version!r}) is missing from the object store",
            )
        tag = result_etag(data, frames=frames)
        headers = {"ETag": tag}
        if if_none_match is not None and _names_tag(if_none_match, tag):
            return Response(status_code=304, headers=headers)
        body = result_body(json.loads(data), frames=frames)
        return Response(body.model_dump_json(), media_type="application/json", headers=headers)

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
        return VideoPage(items=items, next_cursor=next_cursor)

    return router


def result_etag(document: bytes, *, frames: bool) -> str:
    """A strong entity tag: the stored document's bytes and what the query asked of them."""
    digest = hashlib.sha256(_RESULT_RENDERING)
    digest.update(b"\0frames=1\0" if frames else b"\0frames=0\0")
    digest.update(document)
    return f'"{digest.hexdigest()[:32]}"'


def result_body(document: dict[str, Any], *, frames: bool) -> VideoResultDocument:
    """The answer made of a stored result document (``sinks/object_store.py``)."""
    spans = document.get("text_spans")
    if spans is None:  # a document written before spans were: the same spans, made now
        frames_read = [Frame.from_json(raw) for raw in document["frames"]]
        spans = [span.to_json() for span in text_spans(frames_read)]
    video = document["video"]
    return VideoResultDocument(
        video=ResultVideo(
            video_id=video["video_id"], tenant=video["tenant"], uri=redact_url(video["uri"])
        ),
        pipeline_version=document["pipeline_version"],
        stage_versions=document.get("stage_versions") or {},
        completed_at=datetime.fromisoformat(document["completed_at"]),
        probe=ProbeFacts.model_validate(document["probe"]),
        text_spans=[ScreenText.model_validate(span) for span in spans],
        frames=[FrameText.model_validate(raw) for raw in document["frames"]] if frames else None,
    )


def _names_tag(if_none_match: str, tag: str) -> bool:
    """RFC 9110 13.1.2: ``*``, or any listed tag equal to ``tag`` by weak comparison."""
    listed = (part.strip() for part in if_none_match.split(","))
    return any(part == "*" or part.removeprefix("W/") == tag for part in listed)
