"""One video decoded by several ingest replicas at once, while they have nothing else to do.

A process per core leaves every core but one idle while a long video runs alone. Here the
executor asks the replica that takes a video to split it when other ingest replicas are
idle; the replica answers with the ranges after its own (``VideoRanges``, right after the
video: it plans them from the container's packets, see ``stages.ranges``) and decodes the
first; the executor opens one more ingest call per range and merges their chunks into the
video's one stream. Chunks keep the indexes one decoder would give them, so the
orchestration, chunk checkpoints and partial results see the same chunks, only sooner.

Each range fetches the file itself (a local file is read in place; a download is made once
per range). A range that ends otherwise than planned (the packets promised frames the decoder
did not find) fails the attempt with ``split_misaligned``; the executor then decodes that
video in one piece on the next attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, cast

from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from core.errors import RetryableError
from core.records import LocalVideo, VideoRef
from core.speech import SpeechEnd, SpeechPart
from runtime.executor import IngestItem, PooledChunk
from runtime.pools.errors import from_ray
from stages.ranges import VideoRange
from stages.sampling import ResumePoint

_UNSPLIT_KEPT = 1000
#: How long a new ingest call holds back the next one at most: until its first item is back.
#: Serve's router counts a call against its replica only once the call is sent; calls routed
#: before that all see the same counts, and two videos of a burst went to one replica while
#: another idled (its two decoding threads sharing one interpreter).
_ROUTING_WAIT_S = 0.5


@dataclass(frozen=True)
class VideoRanges:
    """The ranges of a video after the one the replica that sent this decodes itself."""

    ranges: tuple[VideoRange, ...]


class IngestCall:
    """One streaming call to the ingest pool, its chunks granted as they are taken: decoding
    stays ``ahead`` chunks ahead of the orchestration, so the pixels in the object store stay
    bounded whatever the length of the video.

    Without ``credits`` the replica decodes as fast as it can: for a call whose every image
    stage runs in the replica, no pixels reach the object store (a chunk crosses as its text,
    thumbnails and vectors), and two actor calls per chunk (a grant, a wait) cost more than
    they bound. Such a call is cancelled when the caller is done with it."""

    def __init__(
        self,
        handle: DeploymentHandle,
        credits: Any | None,
        ahead: int,
        ref: VideoRef,
        start: ResumePoint | None,
        **options: Any,
    ) -> None:
        self.key = uuid.uuid4().hex
        self.start = start
        self.end_chunk: int | None = options.get("end_chunk")
        self._credits = credits
        self._ahead = ahead
        self.taken = 0  # chunks the orchestration has taken
        if credits is not None:
            credits.grant.remote(self.key, ahead)
        self.items = cast(
            DeploymentResponseGenerator[IngestItem | VideoRanges],
            handle.options(stream=True).ingest.remote(
                ref, start, credits=credits, key=self.key, **options
            ),
        )

    def took(self) -> None:
        self.taken += 1
        if self._credits is not None:
            self._credits.grant.remote(self.key, self.taken + self._ahead)

    def close(self) -> None:
        if self._credits is not None:
            self._credits.close.remote(self.key)
        else:
            self.items.cancel()  # a no-op once the stream ended


@dataclass(frozen=True)
class _Ended:
    call: IngestCall
    error: BaseException | None = None


@dataclass
class _Calls:
    """The calls of one video, their items merged into one queue by a pump each."""

    queue: asyncio.Queue[tuple[IngestCall, IngestItem | VideoRanges] | _Ended] = field(
        default_factory=asyncio.Queue
    )
    calls: list[IngestCall] = field(default_factory=list)
    pumps: list[asyncio.Task[None]] = field(default_factory=list)

    async def close(self) -> None:
        for pump in self.pumps:
            pump.cancel()
        await asyncio.gather(*self.pumps, return_exceptions=True)
        for call in self.calls:
            call.close()


class SplitIngest:
    """The ingest side of ``RayExecutor``: opens the calls of a video and merges them."""

    def __init__(
        self,
        handle: DeploymentHandle,
        credits: Callable[[], Any],
        *,
        ahead: int,
        replicas: int,
    ) -> None:
        """``credits``: the ``ChunkCredits`` actor that paces calls, asked for by the first
        paced call."""
        self._handle = handle
        self._credits = credits
        self._ahead = ahead
        self._replicas = replicas
        self._open = 0  # ingest calls of this process under way
        self._videos = 0  # videos this process has in hand (``taking_on``)
        self._ingesting = 0  # of them, those whose calls are under way
        self._routing = asyncio.Lock()  # one call routed at a time, see ``_ROUTING_WAIT_S``
        self._unsplit: dict[str, None] = {}  # videos whose split went wrong: one piece now

    @contextlib.contextmanager
    def taking_on(self) -> Iterator[None]:
        """Held while this process has a video in hand (see ``_parts``)."""
        self._videos += 1
        try:
            yield
        finally:
            self._videos -= 1

    def _parts(self, video_id: str) -> int:
        """How many ranges a new video may be cut into: the ingest replicas left idle once
        the other videos this process has in hand have theirs. In a burst no video is split:
        a range after a video's first decodes its warm-up too, work that the replicas would
        take from the videos waiting behind it."""
        if video_id in self._unsplit:
            return 0
        waiting = max(0, self._videos - self._ingesting)  # videos without calls yet
        idle = self._replicas - self._open - waiting
        return idle if idle > 1 else 0

    def _call(
        self, ref: VideoRef, start: ResumePoint | None, *, paced: bool, **options: Any
    ) -> IngestCall:
        self._open += 1
        credits = self._credits() if paced else None
        return IngestCall(self._handle, credits, self._ahead, ref, start, **options)

    async def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None,
        inline: Collection[str],
        speech_from: int | None,
        *,
        paced: bool = True,
    ) -> AsyncIterator[IngestItem]:
        """The video's items from one call, or from several when it is split. ``paced``:
        decoding waits for grants (chunks whose pixels cross to the stage pools); False
        when every image stage runs in the decoder."""
        inline = tuple(inline)
        calls = _Calls()
        running = 1
        self._ingesting += 1
        try:
            await self._start(calls, ref, resume, paced, inline=inline, speech_from=speech_from)
            while running:
                got = await calls.queue.get()
                if isinstance(got, _Ended):
                    running -= 1
                    if got.error is not None:
                        raise got.error
                    self._check_ended(ref, got.call)
                    continue
                call, item = got
                if isinstance(item, VideoRanges):
                    first_end = item.ranges[0].start
                    call.end_chunk = first_end.chunk_index if first_end is not None else None
                    running += len(item.ranges)
                    for part in item.ranges:
                        await self._start(
                            calls, ref, part.start, paced, inline=inline, end_chunk=part.end_chunk
                        )
                    continue
                if isinstance(item, LocalVideo | SpeechPart | SpeechEnd):
                    yield item
                    continue
                self._check_chunk(ref, call, item.index, item.last)
                # A pooled chunk names its call: ``release`` lets its decoder drop the pixels.
                yield replace(item, stream=call.key) if isinstance(item, PooledChunk) else item
                call.took()
        finally:
            self._ingesting -= 1
            await calls.close()
            self._open -= len(calls.calls)

    async def _start(
        self,
        calls: _Calls,
        ref: VideoRef,
        at: ResumePoint | None,
        paced: bool,
        **options: Any,
    ) -> None:
        """One more call of the video (its first when there is none yet) from ``at`` on, once
        the call this process made before it is routed."""
        routed = asyncio.Event()
        async with self._routing:
            first = not calls.calls
            if first:  # decided once the calls before it are under way
                options["split"] = self._parts(ref.video_id)
            call = self._call(ref, at, paced=paced, **options)
            calls.calls.append(call)
            calls.pumps.append(asyncio.create_task(_pump(call, calls.queue, routed, first=first)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(routed.wait(), _ROUTING_WAIT_S)

    def _check_chunk(self, ref: VideoRef, call: IngestCall, index: int, last: bool) -> None:
        """A range yields its own chunks only, and never the video's last but the last range."""
        if call.end_chunk is None:
            return
        begin = call.start.chunk_index if call.start is not None else 0
        if last or not begin <= index < call.end_chunk:
            found = f"chunk {index} (last: {last}) from the range [{begin}, {call.end_chunk})"
            self._misaligned(ref, found)

    def _check_ended(self, ref: VideoRef, call: IngestCall) -> None:
        """A range's call ends once its last chunk is taken (then it is closed): an earlier end
        is a range that came out short."""
        begin = call.start.chunk_index if call.start is not None else 0
        if call.end_chunk is not None and call.taken < call.end_chunk - begin:
            self._misaligned(ref, f"a range ended before chunk {call.end_chunk}")

    def _misaligned(self, ref: VideoRef, what: str) -> None:
        self._unsplit[ref.video_id] = None
        while len(self._unsplit) > _UNSPLIT_KEPT:
            del self._unsplit[next(iter(self._unsplit))]
        raise RetryableError(
            f"the video's ranges did not decode as planned: {what}", code="split_misaligned"
        )


async def _pump(
    call: IngestCall,
    queue: asyncio.Queue[tuple[IngestCall, IngestItem | VideoRanges] | _Ended],
    routed: asyncio.Event,
    *,
    first: bool,
) -> None:
    """The call's items into ``queue`` (a range's copy of the video left out), then its end;
    ``routed`` set once anything came back."""
    try:
        async for item in call.items:
            routed.set()
            if not first and isinstance(item, LocalVideo):
                continue
            queue.put_nowait((call, item))
    except Exception as exc:
        queue.put_nowait(_Ended(call, from_ray(exc)))
    else:
        queue.put_nowait(_Ended(call))
    finally:
        routed.set()
