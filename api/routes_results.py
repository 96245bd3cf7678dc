"""Routes of a done video's result: the document (JSON), its timed text as WebVTT, and the
shots' thumbnails. All of them read what the pipeline stored in the object store."""

import asyncio
import hashlib
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Header, Path, Query, Response

from api.dependencies import Context, Video
from api.documents import StoredDocument
from api.errors import ApiError
from api.models import ERROR_RESPONSES, ErrorBody
from api.result_models import (
    FrameText,
    ProbeFacts,
    ResultVideo,
    ScreenText,
    ShotInfo,
    SpokenText,
    VideoResultDocument,
    VideoSpeech,
)
from api.vtt import Cue, webvtt
from checkpoint.base import VideoState, VideoStatus
from core.stage_names import CHAPTERS
from core.urls import redact_url
from sinks.object_store import document_key
from sinks.views import stored_shots, stored_spans
from storage.base import ObjectStore

# Part of every result's ETag: change it when the same document gets another rendering.
_RESULT_RENDERING = b"video-result/3"
_NOT_DONE: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "The video is not done (`result_not_ready`)."}
}
_NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: `If-None-Match` names the current `ETag`. No body."}
}

RESULT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    **_NOT_MODIFIED,
    404: {
        "model": ErrorBody,
        "description": "No such video (`not_found`), or the video is done but its result "
        "document is missing from the object store (`result_missing`).",
    },
    **_NOT_DONE,
}
THUMBNAIL_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    **_NOT_MODIFIED,
    200: {"content": {"image/jpeg": {}}, "description": "The shot's keyframe as a JPEG."},
    404: {
        "model": ErrorBody,
        "description": "No such video or shot (`not_found`), no sample fell in the shot or "
        "thumbnails are off (`thumbnail_missing`), or the result is missing "
        "(`result_missing`).",
    },
    **_NOT_DONE,
}
VTT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **RESULT_RESPONSES,
    200: {"content": {"text/vtt": {}}, "description": "A WebVTT file."},
}

Track = Literal["speech", "text", "chapters"]


def result_routes() -> APIRouter:
    router = APIRouter(tags=["results"])

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
        words: Annotated[
            bool,
            Query(description="Include each speech segment's timed words (large for long videos)."),
        ] = False,
        if_none_match: Annotated[str | None, Header(max_length=1024)] = None,
    ) -> Response:
        """What the pipeline found in a done video: its shots (with thumbnail links), its
        on-screen text as spans over time, its speech as timed segments (null when speech
        recognition was off), with ``frames=true`` each sample's OCR lines and with
        ``words=true`` each speech segment's timed words.

        A video that is not done yet is a 409 ``result_not_ready``. A done video whose result
        document is missing from the object store (removed there, or the API reads another
        store than the pipeline writes) is a 404 ``result_missing``. The answer carries a
        strong ``ETag``; a request whose ``If-None-Match`` names it gets a 304, no body.
        """
        stored = await _stored_document(video, context)
        tag = _etag(
            _RESULT_RENDERING,
            b"frames=1" if frames else b"frames=0",
            b"words=1" if words else b"words=0",
            stored.digest,
        )
        if if_none_match is not None and _names_tag(if_none_match, tag):
            return Response(status_code=304, headers={"ETag": tag})
        body = await asyncio.to_thread(_rendered, stored.document, frames=frames, words=words)
        return Response(body, media_type="application/json", headers={"ETag": tag})

    @router.get(
        "/v1/videos/{video_id}/result.vtt", response_class=Response, responses=VTT_RESPONSES
    )
    async def get_result_vtt(
        video: Video,
        context: Context,
        track: Annotated[
            Track,
            Query(
                description="`speech`: the transcript; `text`: the on-screen text spans; "
                "`chapters`: the chapters, one cue per chapter, its title as text."
            ),
        ] = "speech",
        if_none_match: Annotated[str | None, Header(max_length=1024)] = None,
    ) -> Response:
        """A done video's timed text as WebVTT, for players and subtitle tools: the speech
        transcript, one cue per segment, or (``track=text``) the text shown on screen, one cue
        per span, or (``track=chapters``) the chapters, a cue per chapter titled as it is (a
        chapters track, as HTML's ``<track kind="chapters">`` reads). A video without speech
        (no audio track, recognition off) has a speech track of no cues, and one whose result
        has no chapters a chapters track of none. Errors as for the result."""
        stored = await _stored_document(video, context)
        tag = _etag(_RESULT_RENDERING, b"vtt", track.encode(), stored.digest)
        if if_none_match is not None and _names_tag(if_none_match, tag):
            return Response(status_code=304, headers={"ETag": tag})
        body = await asyncio.to_thread(lambda: webvtt(_cues(stored.document, track)))
        return Response(body, media_type="text/vtt; charset=utf-8", headers={"ETag": tag})

    @router.get(
        "/v1/videos/{video_id}/shots/{shot}/thumbnail.jpg",
        response_class=Response,
        responses=THUMBNAIL_RESPONSES,
    )
    async def get_thumbnail(
        video: Video,
        context: Context,
        shot: Annotated[int, Path(ge=0, le=1_000_000)],
        if_none_match: Annotated[str | None, Header(max_length=1024)] = None,
    ) -> Response:
        """The keyframe of one shot of a done video, as a small JPEG."""
        stored = await _stored_document(video, context)
        shots = stored.document.get("shots") or []
        if shot >= len(shots):
            raise ApiError(404, "not_found", f"video {video.video_id!r} has no shot {shot}")
        key = shots[shot].get("thumbnail")
        results = _results(context)
        image = None if key is None else await asyncio.to_thread(results.get_bytes, key)
        if image is None:
            raise ApiError(
                404,
                "thumbnail_missing",
                f"shot {shot} of video {video.video_id!r} has no thumbnail",
            )
        tag = _etag(image)
        headers = {"ETag": tag, "Cache-Control": "private, max-age=86400"}
        if if_none_match is not None and _names_tag(if_none_match, tag):
            return Response(status_code=304, headers=headers)
        return Response(image, media_type="image/jpeg", headers=headers)

    return router


async def _stored_document(video: VideoStatus, context: Context) -> StoredDocument:
    """The stored result document of a done video, or the error that says why not; read and
    parsed off the event loop, once per stored version (``api.documents``)."""
    if video.status is not VideoState.DONE:
        raise ApiError(
            409, "result_not_ready", f"video {video.video_id!r} is {video.status.value}, not done"
        )
    key = document_key(video.tenant, video.video_id, video.pipeline_version)
    stored = await context.documents.read(_results(context), key)
    if stored is None:
        raise ApiError(
            404,
            "result_missing",
            f"video {video.video_id!r} is done, but its result (pipeline version "
            f"{video.pipeline_version!r}) is missing from the object store",
        )
    return stored


def _results(context: Context) -> ObjectStore:
    if context.results is None:
        raise ApiError(503, "results_unavailable", "no result store is configured")
    return context.results


def _rendered(document: dict[str, Any], *, frames: bool, words: bool) -> str:
    return result_body(document, frames=frames, words=words).model_dump_json()


def result_body(document: dict[str, Any], *, frames: bool, words: bool) -> VideoResultDocument:
    """The answer made of a stored result document (``sinks/object_store.py``)."""
    spans, shots = stored_spans(document), stored_shots(document)
    video = document["video"]
    path = f"/v1/videos/{quote(video['video_id'], safe='')}/shots"
    return VideoResultDocument(
        video=ResultVideo(
            video_id=video["video_id"], tenant=video["tenant"], uri=redact_url(video["uri"])
        ),
        pipeline_version=document["pipeline_version"],
        stage_versions=document.get("stage_versions") or {},
        completed_at=datetime.fromisoformat(document["completed_at"]),
        probe=ProbeFacts.model_validate(document["probe"]),
        text_spans=[ScreenText.model_validate(span) for span in spans],
        shots=[
            ShotInfo.model_validate(
                {
                    **shot,
                    "thumbnail_url": f"{path}/{shot['index']}/thumbnail.jpg"
                    if shot.get("thumbnail")
                    else None,
                }
            )
            for shot in shots
        ],
        frames=[FrameText.model_validate(raw) for raw in document["frames"]] if frames else None,
        speech=_stored_speech(document, words=words),
        outputs=document.get("outputs") or {},
    )


def _stored_speech(document: dict[str, Any], *, words: bool) -> VideoSpeech | None:
    """The document's speech (None when it has none: recognition off, or written before
    speech was), its segments' words only when asked for."""
    speech: dict[str, Any] | None = document.get("speech")
    if speech is None:
        return None
    segments = [
        SpokenText.model_validate({**segment, "words": segment.get("words") if words else None})
        for segment in speech["segments"]
    ]
    return VideoSpeech.model_validate({**speech, "segments": segments})


def _cues(document: dict[str, Any], track: Track) -> list[Cue]:
    if track == "chapters":
        output = (document.get("outputs") or {}).get(CHAPTERS) or {}
        chapters = (output.get("data") or {}).get("chapters") or []
        return [Cue(float(c["start_s"]), float(c["end_s"]), str(c["title"])) for c in chapters]
    if track == "text":
        spans = stored_spans(document)
        return [Cue(float(s["start_s"]), float(s["end_s"]), str(s["text"])) for s in spans]
    segments = (document.get("speech") or {}).get("segments") or []
    return [Cue(float(s["start_s"]), float(s["end_s"]), str(s["text"])) for s in segments]


def _etag(*parts: bytes) -> str:
    """A strong entity tag over what the answer is made of."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
        digest.update(b"\0")
    return f'"{digest.hexdigest()[:32]}"'


def _names_tag(if_none_match: str, tag: str) -> bool:
    """RFC 9110 13.1.2: ``*``, or any listed tag equal to ``tag`` by weak comparison."""
    listed = (part.strip() for part in if_none_match.split(","))
    return any(part == "*" or part.removeprefix("W/") == tag for part in listed)
