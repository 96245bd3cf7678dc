"""Response bodies of the progress API, beside ``VideoStatus`` (``checkpoint/base.py``).

They exist so the OpenAPI schema names every field a client can rely on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from checkpoint.base import VideoState, VideoStatus
from core.description import ShotDescription
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
    kinds: list[Literal["text", "speech", "description", "frame"]] = Field(
        description="What matched: on-screen text, speech, shot descriptions, frames by "
        "what they show (with an image embedding model)."
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
    done: int = Field(description="Chunks finished by `stage`.")
    total: int | None = Field(description="Chunks in the video, once decoding has ended.")
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


class ResultVideo(BaseModel):
    video_id: str
    tenant: str
    uri: str = Field(description="The source URI, its userinfo and query hidden (`***`).")


class ProbeFacts(BaseModel):
    """What the container says about the video."""

    duration_s: float
    width: int
    height: int
    fps: float


class ScreenText(BaseModel):
    """One text on screen over consecutive samples: the OCR lines of those samples merged,
    misreadings and flicker forgiven (see README, "What a video shows, and when")."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The most frequent reading.")
    box: list[tuple[float, float]] = Field(
        description="Corners in pixels (top-left, top-right, bottom-right, bottom-left): the "
        "median bounds of the readings."
    )
    start_s: float = Field(description="The first sample it was read in.")
    end_s: float = Field(
        description="The sample after the last one it was read in (or one sample interval "
        "after the video's last sample)."
    )
    score: float = Field(description="The mean OCR score of its readings.")
    frames: int = Field(description="How many samples it was read in.")


class ShotInfo(BaseModel):
    """One shot: from the boundary that starts it to the next (see README, "What a video
    shows, and when")."""

    model_config = ConfigDict(frozen=True)

    index: int
    start_s: float
    end_s: float
    entered_by: Literal["start", "cut", "gradual"] = Field(
        description="How the shot begins: the video's start, a hard cut, or a gradual "
        "transition (dissolve, fade) whose middle is `start_s`."
    )
    transition_s: tuple[float, float] | None = Field(
        description="From when to when a gradual transition into the shot blends."
    )
    keyframe: int | None = Field(
        description="The index of the sample that shows the shot: the first taken in it after "
        "its transition; null when no sample fell in it."
    )
    keyframe_s: float | None
    samples: int = Field(description="How many samples were taken in the shot.")
    thumbnail_url: str | None = Field(
        default=None, description="Where the keyframe's JPEG is served; null without one."
    )
    description: ShotDescription | None = Field(
        default=None,
        description="What the VLM says the keyframe shows, in a fixed JSON schema (constrained "
        "decoding: it always parses); null when no VLM runs or its answer did not complete.",
    )


class TextLine(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    score: float
    box: list[tuple[float, float]] = Field(description="Polygon corners in pixels.")


class FrameText(BaseModel):
    """One sampled frame and the OCR lines read in it."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="Position among the video's samples, 0-based.")
    timestamp_s: float
    ocr_lines: list[TextLine]


class TimedWord(BaseModel):
    """One word of a speech segment, as the speech model timed it."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The word as decoded, with its leading space if it has one.")
    start_s: float
    end_s: float
    probability: float = Field(description="The model's confidence in the word, 0 to 1.")


class SpokenText(BaseModel):
    """One segment of the transcript: a stretch of speech, in seconds on the video's
    timeline."""

    model_config = ConfigDict(frozen=True)

    start_s: float
    end_s: float
    text: str
    avg_logprob: float = Field(
        description="Mean log-probability of the segment's tokens: near 0 is confident, "
        "below about -1 often a misheard stretch."
    )
    no_speech_prob: float = Field(
        description="The model's probability that the stretch holds no speech at all, 0 to 1."
    )
    words: list[TimedWord] | None = Field(
        default=None,
        description="Each word with its times; only with `?words=true`. Empty when the "
        "pipeline recognised speech without word timestamps.",
    )


class VideoSpeech(BaseModel):
    """What was said in the video: its audio track's speech as timed segments."""

    model_config = ConfigDict(frozen=True)

    status: Literal["done", "no_audio", "failed"] = Field(
        description="`done`; `no_audio` (the video has no audio track); `failed` (the track "
        "could not be read to its end: `segments` hold what came before, `error` says why)."
    )
    language: str | None = Field(
        description="The language most of the speech was decoded in, as the model names it "
        "(ISO 639-1 where there is one, e.g. `en`); null when nothing was said."
    )
    audio_s: float = Field(description="Seconds of audio transcribed.")
    segments: list[SpokenText]
    error: ErrorDetail | None = Field(
        default=None, description="Why recognition stopped, when `status` is `failed`."
    )


class VideoResultDocument(BaseModel):
    """What the pipeline found in one done video."""

    video: ResultVideo
    pipeline_version: str
    stage_versions: dict[str, str]
    completed_at: datetime
    probe: ProbeFacts
    text_spans: list[ScreenText]
    shots: list[ShotInfo]
    frames: list[FrameText] | None = Field(
        default=None, description="Each sample's OCR lines; only with `?frames=true`."
    )
    speech: VideoSpeech | None = Field(
        default=None,
        description="The transcript; null when speech recognition was off for the video "
        "(or the video was processed before it existed).",
    )


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
