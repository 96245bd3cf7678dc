"""Response bodies of the progress API, beside ``VideoStatus`` (``checkpoint/base.py``).

They exist so the OpenAPI schema names every field a client can rely on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from checkpoint.base import ProgressEvent, VideoState, VideoStatus
from core.records import SearchHit


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable snake_case reason, e.g. `not_found`.")
    message: str


class ErrorBody(BaseModel):
    """Every error answer has this shape."""

    error: ErrorDetail


class VideoPage(BaseModel):
    """One page of videos, newest first."""

    items: list[VideoStatus]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` to read the next page; null at the end."
    )


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    video_id: str
    tenant: str
    frame_index: int
    timestamp_s: float
    text: str
    score: float = Field(description="Distance to the query; smaller is nearer.")

    @classmethod
    def from_hit(cls, hit: SearchHit) -> SearchResult:
        return cls(
            video_id=hit.video_id,
            tenant=hit.tenant,
            frame_index=hit.frame_index,
            timestamp_s=hit.timestamp_s,
            text=hit.text,
            score=hit.score,
        )


class SearchResults(BaseModel):
    query: str
    k: int
    hits: list[SearchResult]


class ProgressUpdate(BaseModel):
    """The data of a `progress` server-sent event."""

    model_config = ConfigDict(frozen=True)

    video_id: str
    tenant: str
    status: VideoState
    stage: str | None
    done: int = Field(description="Chunks finished by `stage`.")
    total: int | None = Field(description="Chunks in the video, once decoding has ended.")
    at: datetime

    @classmethod
    def from_event(cls, event: ProgressEvent) -> ProgressUpdate:
        return cls(
            video_id=event.video_id,
            tenant=event.tenant,
            status=event.status,
            stage=event.stage,
            done=event.done,
            total=event.total,
            at=event.at,
        )


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class DeadLetter(BaseModel):
    """Something that could not be processed or delivered and waits for an operator."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="Where it sits, e.g. `topic/partition/offset` or a webhook id.")
    kind: str = Field(description="What failed: `event` (an upload event) or `webhook`.")
    video_id: str | None = None
    tenant: str | None = None
    code: str = Field(description="The stable reason code of the failure.")
    message: str = ""
    at: datetime | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class DeadLetterPage(BaseModel):
    items: list[DeadLetter]


# -- OpenAPI fragments ----------------------------------------------------------------------

_SCHEMAS = "#/components/schemas/"
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (401, 403, 404, 422, 503)
}
# Event-stream routes answer errors as JSON too, before the stream starts; FastAPI would
# otherwise document them under the route's own media type.
STREAM_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"content": {"application/json": {"schema": {"$ref": f"{_SCHEMAS}ErrorBody"}}}}
    for status in (401, 403, 404, 422)
}
EVENT_STREAM_OPENAPI: dict[str, Any] = {
    "responses": {
        "200": {
            "content": {
                "text/event-stream": {
                    "itemSchema": {
                        "properties": {
                            "event": {"enum": ["status", "progress", "error"]},
                            "data": {
                                "contentMediaType": "application/json",
                                "contentSchema": {
                                    "oneOf": [
                                        {"$ref": f"{_SCHEMAS}VideoStatus"},
                                        {"$ref": f"{_SCHEMAS}ProgressUpdate"},
                                        {"$ref": f"{_SCHEMAS}ErrorDetail"},
                                    ]
                                },
                            },
                        }
                    }
                }
            }
        }
    }
}


def add_event_schemas(app: FastAPI) -> None:
    """Put the event payload models into the app's OpenAPI components: they appear only
    inside event streams, which FastAPI does not scan for models."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = generate()["components"]["schemas"]
            for model in (ProgressUpdate, ErrorDetail, VideoStatus):
                schema = model.model_json_schema(ref_template=_SCHEMAS + "{model}")
                for name, nested in schema.pop("$defs", {}).items():
                    schemas.setdefault(name, nested)
                schemas.setdefault(model.__name__, schema)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
