"""Response bodies of the progress API, beside ``VideoStatus`` (``checkpoint/base.py``).

They exist so the OpenAPI schema names every field a client can rely on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from checkpoint.base import VideoState, VideoStatus
from core.urls import redact_url


def shown(status: VideoStatus) -> VideoStatus:
    """A video's status as the API shows it: its source URI with the userinfo and query
    hidden (``core.urls.redact_url``), so neither a password nor a presigned signature leaves
    the service in a status, a list or an event stream."""
    return status.model_copy(update={"uri": redact_url(status.uri)}) if status.uri else status


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable snake_case reason, e.g. `not_found`.")
    message: str


class ErrorBody(BaseModel):
    """Every error answer has this shape."""

    error: ErrorDetail


class DeletionAccepted(BaseModel):
    """A deletion taken: the video goes with the event named here."""

    video_id: str
    event: str = Field(description="Where the deletion event went: topic/partition/offset.")


class VideoPage(BaseModel):
    """One page of videos, newest first."""

    items: list[VideoStatus]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` to read the next page; null at the end."
    )


class SearchResult(BaseModel):
    """One place in one video: overlapping matches of the video (a caption and the sentence
    said while it shows) are one hit."""

    # Built from a hit as it is: ``SearchResult.model_validate(hit)``, then the thumbnail link.
    model_config = ConfigDict(frozen=True, from_attributes=True)

    video_id: str
    tenant: str
    start_s: float
    end_s: float
    text: str = Field(description="The best matching segment's text (cut at 200 characters).")
    kinds: list[str] = Field(
        description="What matched: `text` (on-screen text), `speech`, `description` (shot "
        "descriptions), `frame` (frames by what they show, with an image embedding model), "
        "or a kind a video stage makes searchable."
    )
    score: float = Field(
        description="Higher is better: fused reciprocal rank (hybrid), cosine similarity "
        "(vector) or BM25 (text)."
    )
    shot: int | None = Field(description="The shot that shows the place.")
    thumbnail: str | None = Field(
        default=None, description="Link to the shot's thumbnail, if the video has one."
    )
    partial: bool = Field(description="Found before the video was done.")


class SearchResults(BaseModel):
    query: str
    k: int
    method: Literal["hybrid", "vector", "text"]
    hits: list[SearchResult]


class ProgressUpdate(BaseModel):
    """The data of a `progress` server-sent event."""

    # Built from a ``ProgressEvent`` as it is: ``ProgressUpdate.model_validate(event)``.
    model_config = ConfigDict(frozen=True, from_attributes=True)

    video_id: str
    tenant: str
    status: VideoState
    stage: str | None
    done: int = Field(description="Parts finished by `stage` (as in `StageProgress`).")
    total: int | None = Field(description="Parts in all, once known (as in `StageProgress`).")
    applicable: bool = Field(
        default=True,
        description="False when `stage` has nothing to do for this video, as `speech` for a "
        "video without an audio track; such a stage counts as finished.",
    )
    at: datetime


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Stages(BaseModel):
    """The pipeline's stages."""

    stages: list[str] = Field(
        description="Every stage in pipeline order, by the names a video's `stages` and "
        "`timings` and its `progress` events use (a pipeline runs the configured ones)."
    )


class DeadLetterEntry(BaseModel):
    """Something that could not be processed or delivered and waits for an operator."""

    # An entry of the list, of either kind. The schema keeps the name it has always published,
    # `DeadLetter` (``_PUBLISHED_NAMES``), beside the consumer's and notifier's own records.
    model_config = ConfigDict(frozen=True, title="DeadLetter")

    id: str = Field(description="Where it sits, e.g. `topic/partition/offset` or a webhook id.")
    kind: str = Field(description="What failed: `event` (an upload event) or `webhook`.")
    video_id: str | None = None
    tenant: str | None = None
    code: str = Field(description="The stable reason code of the failure.")
    message: str = ""
    at: datetime | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class DeadLetterPage(BaseModel):
    items: list[DeadLetterEntry]


class ReplayResult(BaseModel):
    """What a replay did."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: Literal["event", "webhook"]
    outcome: str = Field(
        description="`published` (an event, back on the uploads topic), or the webhook "
        "attempt's outcome: `delivered`, `failed`, `disabled`."
    )
    code: str | None = Field(default=None, description="The reason, when not a success.")
    detail: str = ""


# -- OpenAPI fragments ----------------------------------------------------------------------

_SCHEMAS = "#/components/schemas/"
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (401, 403, 404, 422, 503)
}
# Event-stream routes answer errors as JSON too, before the stream starts; FastAPI would
# otherwise document them under the route's own media type.
STREAM_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"content": {"application/json": {"schema": {"$ref": f"{_SCHEMAS}ErrorBody"}}}}
    for status in (401, 403, 404, 422, 429)
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


# Models named in Python otherwise than in the schema, which keeps the names it published.
_PUBLISHED_NAMES = {DeadLetterEntry.__name__: "DeadLetter"}


def complete_openapi(app: FastAPI) -> None:
    """Finish the app's OpenAPI document as FastAPI first builds it: add the event payload
    models (they appear only inside event streams, which FastAPI does not scan for models)
    and give models their published names."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            components = document["components"]
            _add_event_schemas(components["schemas"])
            components["schemas"] = {
                _PUBLISHED_NAMES.get(name, name): schema
                for name, schema in components["schemas"].items()
            }
            _publish_refs(document)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


def _add_event_schemas(schemas: dict[str, Any]) -> None:
    for model in (ProgressUpdate, ErrorDetail, VideoStatus):
        schema = model.model_json_schema(ref_template=_SCHEMAS + "{model}")
        for name, nested in schema.pop("$defs", {}).items():
            schemas.setdefault(name, nested)
        schemas.setdefault(model.__name__, schema)


def _publish_refs(node: object) -> None:
    """Point every ``$ref`` under ``node`` at the published name of its model."""
    if isinstance(node, list):
        for item in node:
            _publish_refs(item)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_SCHEMAS):
        name = ref.removeprefix(_SCHEMAS)
        node["$ref"] = _SCHEMAS + _PUBLISHED_NAMES.get(name, name)
    for value in node.values():
        _publish_refs(value)
