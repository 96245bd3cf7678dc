"""The ``videos.uploaded`` event contract. The Kafka key is the ``video_id``."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from consumers.errors import InvalidEvent
from core.records import VideoRef

# Ids end up in object keys, Redis keys and URLs: keep them to a safe alphabet.
VIDEO_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
URI_SCHEMES = ("file", "s3", "http", "https")


class VideoUploaded(BaseModel):
    """One uploaded video to understand."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    schema_version: Literal[1] = 1
    video_id: str = Field(pattern=VIDEO_ID_PATTERN.pattern)
    uri: str = Field(min_length=1, max_length=4096)
    tenant: str = Field(default="default", pattern=TENANT_PATTERN.pattern)
    callback_url: str | None = Field(default=None, max_length=2048)
    metadata: dict[str, Any] = Field(default_factory=dict)
    submitted_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str) -> str:
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        if scheme not in URI_SCHEMES:
            raise ValueError(f"uri scheme must be one of {', '.join(URI_SCHEMES)}")
        return uri

    @field_validator("callback_url")
    @classmethod
    def _http_callback(cls, url: str | None) -> str | None:
        if url is not None and not url.lower().startswith(("http://", "https://")):
            raise ValueError("callback_url must be an http(s) URL")
        return url

    def to_ref(self) -> VideoRef:
        return VideoRef(
            video_id=self.video_id,
            uri=self.uri,
            tenant=self.tenant,
            callback_url=self.callback_url,
            metadata=dict(self.metadata),
        )

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()


class VideoDeleted(BaseModel):
    """A video taken down (its uploader deleted it, a legal request): everything the service
    holds of it is removed. Published to the upload topic under the video's key, so it stays
    in order with the video's uploads; ``tenant`` must own the video."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    type: Literal["video.deleted"]
    video_id: str = Field(pattern=VIDEO_ID_PATTERN.pattern)
    tenant: str = Field(default="default", pattern=TENANT_PATTERN.pattern)
    reason: str | None = Field(default=None, max_length=512)

    def to_bytes(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()


Event = VideoUploaded | VideoDeleted


def parse_event(key: bytes | None, value: bytes | None, *, max_bytes: int) -> Event:
    """Validate one Kafka record; raise ``InvalidEvent`` with a reason code if it is not a
    valid upload (or deletion) event. The key, when present, must equal the body's
    ``video_id``."""
    key_id = _readable_id(key)
    if value is None:
        raise InvalidEvent("record has no value", code="event_empty", video_id=key_id)
    if len(value) > max_bytes:
        raise InvalidEvent(
            f"event is {len(value)} bytes, the limit is {max_bytes}",
            code="event_too_large",
            video_id=key_id,
        )
    try:
        body = json.loads(value, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad bytes, bad JSON and integers past Python's digit limit;
        # RecursionError, nesting deeper than the interpreter's stack.
        raise InvalidEvent(
            f"event is not JSON: {_printable(str(exc))}", code="event_not_json", video_id=key_id
        ) from None
    if not isinstance(body, dict):
        raise InvalidEvent("event must be a JSON object", code="event_invalid", video_id=key_id)
    readable = _readable(body.get("video_id"), VIDEO_ID_PATTERN) or key_id
    tenant = _readable(body.get("tenant"), TENANT_PATTERN)
    model: type[VideoUploaded] | type[VideoDeleted] = (
        VideoDeleted if body.get("type") == "video.deleted" else VideoUploaded
    )
    try:
        event = model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'event'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidEvent(
            _printable(problems), code="event_invalid", video_id=readable, tenant=tenant
        ) from None
    try:
        # Lone surrogates in free-form metadata pass validation but cannot be written out.
        event.to_bytes()
    except ValueError as exc:
        raise InvalidEvent(
            f"event cannot be serialized: {_printable(str(exc))}",
            code="event_invalid",
            video_id=readable,
            tenant=tenant,
        ) from None
    # Compare bytes: a key that is present but not a readable id must not pass either.
    if key is not None and key != event.video_id.encode():
        raise InvalidEvent(
            f"record key {key[:200]!r} differs from video_id {event.video_id!r}",
            code="event_key_mismatch",
            video_id=event.video_id,
            tenant=event.tenant,
        )
    return event


def _readable_id(key: bytes | None) -> str | None:
    if key is None:
        return None
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return None
    return _readable(text, VIDEO_ID_PATTERN)


def _readable(value: object, pattern: re.Pattern[str]) -> str | None:
    """A body's field as it may be shown and keyed on, or None. (``fullmatch``: ``$`` in a
    pattern would also accept a trailing newline.)"""
    return value if isinstance(value, str) and pattern.fullmatch(value) else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _printable(text: str) -> str:
    """Messages end up in logs and headers: no lone surrogates."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
