"""Live progress as server-sent events: of every visible video, or of one video until it ends."""

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent

from api.dependencies import ApiContext, Caller, Context, Video, scope_tenant
from api.metrics import API_STREAMS
from api.models import (
    EVENT_STREAM_OPENAPI,
    STREAM_ERROR_RESPONSES,
    ErrorDetail,
    ProgressUpdate,
    shown,
)
from checkpoint.base import CheckpointStore, ProgressEvent, VideoState, VideoStatus
from core.errors import ReelsenseError

TERMINAL = frozenset({VideoState.DONE, VideoState.FAILED})

event_routes = APIRouter(tags=["events"], responses=STREAM_ERROR_RESPONSES)


def _admit_stream(caller: Caller, context: Context) -> None:
    """429 before the stream starts when as many are open as may be."""
    context.progress.admit(caller)


Admitted = Annotated[None, Depends(_admit_stream)]


@event_routes.get(
    "/v1/events", response_class=EventSourceResponse, openapi_extra=EVENT_STREAM_OPENAPI
)
async def all_events(
    caller: Caller,
    context: Context,
    _: Admitted,
    tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> AsyncIterator[ServerSentEvent]:
    """Live `progress` events of every visible video, from now on. A `: heartbeat`
    comment arrives whenever nothing else did for a while. 429 (`too_many_streams`) when the
    server or the caller's tenant has as many streams open as it may."""
    scoped = scope_tenant(caller, tenant)
    async for item in _event_stream(
        context, lambda e: scoped is None or e.tenant == scoped, caller, None
    ):
        yield item


@event_routes.get(
    "/v1/videos/{video_id}/events",
    response_class=EventSourceResponse,
    openapi_extra=EVENT_STREAM_OPENAPI,
)
async def video_events(
    caller: Caller, video: Video, context: Context, _: Admitted
) -> AsyncIterator[ServerSentEvent]:
    """A `status` event with the current status, then live `progress` events of the
    video; after it reaches done or failed, a final `status` event and the end."""
    async for item in _event_stream(context, lambda e: e.video_id == video.video_id, caller, video):
        yield item


async def _event_stream(
    context: ApiContext,
    wanted: Callable[[ProgressEvent], bool],
    caller: str | None,
    video: VideoStatus | None,
) -> AsyncIterator[ServerSentEvent]:
    """Progress events that pass ``wanted``, with heartbeats. With ``video`` the stream is
    that video's: it opens with its status and ends once the video is done or failed."""
    store = context.store
    async with context.progress.listen(wanted, tenant=caller) as queue:
        API_STREAMS.inc()
        try:
            if video is not None:
                # Subscribed first, then read: an event between the two is not lost. A
                # finish before the subscription took hold is caught by the re-read at each
                # heartbeat.
                current = await store.get(video.video_id) or video
                yield _status_event(current)
                if current.status in TERMINAL:
                    return
            async for item in _queued_events(store, queue, context.heartbeat_s, video):
                yield item
        finally:
            API_STREAMS.dec()


async def _queued_events(
    store: CheckpointStore,
    queue: asyncio.Queue[ProgressEvent | BaseException],
    heartbeat_s: float,
    video: VideoStatus | None,
) -> AsyncIterator[ServerSentEvent]:
    """The pump's events as they come, a heartbeat when none came for ``heartbeat_s``;
    until the pump fails, or ``video`` is done or failed."""
    while True:
        try:
            item = await asyncio.wait_for(queue.get(), timeout=heartbeat_s)
        except TimeoutError:
            yield ServerSentEvent(comment="heartbeat")
            finished = await _finished(store, video)
            if finished is not None:
                yield _status_event(finished)
                return
            continue
        if isinstance(item, BaseException):
            code = item.code if isinstance(item, ReelsenseError) else "stream_failed"
            yield ServerSentEvent(event="error", data=ErrorDetail(code=code, message=str(item)))
            return
        yield ServerSentEvent(event="progress", data=ProgressUpdate.model_validate(item))
        if video is not None and item.status in TERMINAL:
            final = await store.get(video.video_id)
            if final is not None:
                yield _status_event(final)
            return


async def _finished(store: CheckpointStore, video: VideoStatus | None) -> VideoStatus | None:
    """``video``'s status when it is done or failed by now; None for an open stream."""
    if video is None:
        return None
    current = await store.get(video.video_id) or video
    return current if current.status in TERMINAL else None


def _status_event(status: VideoStatus) -> ServerSentEvent:
    return ServerSentEvent(event="status", data=shown(status))
