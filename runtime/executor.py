"""How the per-video orchestration reaches the stages.

``StageExecutor`` is what ``VideoProcessor`` talks to. Two implementations run the same stage
classes: ``LocalExecutor`` (in this process, threads; unit tests and baselines) and
``runtime.pools.executor.RayExecutor`` (Ray Serve stage pools; the service).

An ingest stream yields the video, then one ticket per chunk, of one of three kinds:
``PooledChunk`` (pixels for the image stages to read), ``FusedChunk`` (every image stage ran
inside the decoder: outputs, no pixels) or ``ReplayedChunk`` (a chunk of an earlier result).
When speech is asked for, the transcripts of the audio track's windows (``SpeechPart``) come
between the tickets as they are recognised, and its ``SpeechEnd`` after them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Mapping
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from core.records import Chunk, Frame, LocalVideo, VideoRef
from core.speech import SpeechItem
from stages.sampling import ResumePoint
from stages.speech import SpeechStage

if TYPE_CHECKING:
    from ray import ObjectRef


@dataclass(frozen=True)
class ChunkTicket:
    """A chunk the ingest stream hands over: which one, its sampled frames, whether last."""

    video_id: str
    index: int
    frames: int
    last: bool

    @property
    def applied(self) -> frozenset[str]:
        """The stages the decoder already ran on the chunk."""
        return frozenset()


@dataclass(frozen=True)
class FusedOutputs:
    """What the stages run inside the decoder found in a chunk, and what each took."""

    stages: frozenset[str]
    chunk: Chunk  # their outputs merged, no pixels
    seconds: Mapping[str, float]


@dataclass(frozen=True)
class PooledChunk(ChunkTicket):
    """A decoded chunk whose pixels wait for the image-stage pools: the chunk itself
    in-process, or an object-store reference on Ray, so pixels travel from the decoder to the
    image stages without passing through the orchestrating process. ``fused``: what the stages
    run inside the decoder found already (the others read the pixels)."""

    pixels: Chunk | ObjectRef[Chunk]
    stream: str = ""  # the ingest stream it came from, where the executor needs to know
    fused: FusedOutputs | None = None

    @property
    def applied(self) -> frozenset[str]:
        return self.fused.stages if self.fused else frozenset()


@dataclass(frozen=True)
class FusedChunk(ChunkTicket):
    """A chunk every image stage analysed inside the decoder: their outputs, no pixels."""

    fused: FusedOutputs

    @property
    def applied(self) -> frozenset[str]:
        return self.fused.stages


@dataclass(frozen=True)
class ReplayedChunk(ChunkTicket):
    """A chunk of an earlier result, cut as the decoder cuts it: no pixels, no image stage
    left to run."""

    chunk: Chunk


IngestChunk = PooledChunk | FusedChunk | ReplayedChunk
IngestItem = LocalVideo | IngestChunk | SpeechItem
T = TypeVar("T")


@contextlib.asynccontextmanager
async def closing(stream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """``stream``, closed when the block ends, however it ends. ``async for`` leaves an async
    generator it stops early (an error, a cancelled task) suspended, and what its ``finally``
    gives back (a thread lease, the fetched file, the speech listener it runs) stays taken until
    the garbage collector finds it. Each stream that reads another closes it this way."""
    try:
        yield stream
    finally:
        if isinstance(stream, AsyncGenerator):
            await stream.aclose()


async def with_speech(
    tickets: AsyncIterator[T],
    stage: SpeechStage | None,
    video: LocalVideo,
    speech_from: int | None,
    thread: Executor | None = None,
) -> AsyncIterator[T | SpeechItem]:
    """``tickets``, with the video's speech from window ``speech_from`` on (None: none)
    recognised by ``stage`` in a worker thread meanwhile (on ``thread`` when given, a lease of
    ``runtime.activity.StageThreads``): what it has heard is put between
    the tickets, the rest follows the last one. Decoding never waits for speech recognition
    (nor the reverse) until the tickets end. An error of the speech ends the stream as soon
    as it is seen. On the way out the recognition is told to stop and the window under way
    is let finish (the file it reads is removed after this returns)."""
    if stage is None or speech_from is None:
        async with closing(tickets):
            async for ticket in tickets:
                yield ticket
        return
    stop = threading.Event()
    speech = stage.stream(video, speech_from, stop)
    heard: asyncio.Queue[SpeechItem | None] = asyncio.Queue()

    async def listen() -> None:
        loop = asyncio.get_running_loop()
        try:
            while (item := await loop.run_in_executor(thread, next, speech, None)) is not None:
                heard.put_nowait(item)
        finally:
            heard.put_nowait(None)

    listening = asyncio.create_task(listen())
    ended = False  # the listener has put its last item
    try:
        async with closing(tickets):
            async for ticket in tickets:
                while not heard.empty():
                    if (item := heard.get_nowait()) is None:
                        ended = True
                        await listening  # raises its error
                    else:
                        yield item
                yield ticket
        while not ended and (item := await heard.get()) is not None:
            yield item
        await listening  # raises its error
    finally:
        stop.set()
        await asyncio.wait([listening])
        if not listening.cancelled():
            listening.exception()  # seen: an error after the stream's own is not logged


def merge_outputs(outputs: list[Chunk], fields: Collection[str]) -> Chunk:
    """Combine what the image stages found in the same chunk, frame by frame: each of
    ``fields`` (the outputs the stages declare they fill, ``Stage.fills``: ``Frame`` fields or
    ``extras``) takes the first output's value that is not empty; the rest is the first
    output's, without pixels."""
    base = outputs[0]
    frames: list[Frame] = []
    for position, frame in enumerate(base.frames):
        merged = replace(frame, image=None)
        for other in outputs[1:]:
            found = other.frames[position]
            taken = {
                name: value
                for name in fields
                if _empty(merged.output(name)) and not _empty(value := found.output(name))
            }
            merged = merged.with_outputs(taken) if taken else merged
        frames.append(merged)
    return replace(base, frames=frames)


def _empty(value: object) -> bool:
    """Whether a stage left a field as it was: None, or an empty text, list or mapping (a
    vector is never falsy-tested: an array has no single truth value)."""
    if value is None:
        return True
    return isinstance(value, str | list | tuple | dict) and not value


class StageExecutor(ABC):
    """Runs the stages for the orchestrator, nothing else: what the sinks hold is reached
    through ``runtime.results.ResultStore``."""

    #: Stages that read pixels, run side by side on each chunk (e.g. ("ocr", "vlm")).
    image_stages: tuple[str, ...]
    #: Whether an embedding stage runs after the image stages.
    embeds: bool
    #: Stages the executor can run inside the decoder, on each chunk as it is decoded.
    inline: frozenset[str] = frozenset()

    @abstractmethod
    def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        inline: Collection[str] = (),
        speech_from: int | None = None,
    ) -> AsyncIterator[IngestItem]:
        """Fetch and probe the video (yield its ``LocalVideo`` first), then decode and sample it
        (from ``resume`` on), yielding a ticket per chunk as soon as the chunk is ready: a
        ``PooledChunk``, or a ``FusedChunk`` once every image stage is in ``inline``. The
        stages of ``inline`` (a subset of ``self.inline``, the embedder only with every image
        stage) run on each chunk before its ticket is yielded. ``speech_from``: recognise the
        speech of the audio track from that window on (see ``with_speech``); None: none."""

    @abstractmethod
    async def analyse(self, stage: str, ticket: PooledChunk) -> Chunk:
        """Run one image stage on a chunk's pixels; the returned chunk carries no pixels."""

    def release(self, ticket: PooledChunk) -> None:  # noqa: B027 - optional hook
        """The image stages are done with the ticket's pixels (whatever their outcome)."""

    def taking_on(self) -> AbstractContextManager[None]:
        """Held while the orchestration has a video in hand, from its event to its outcome: an
        executor that splits a video over idle replicas leaves them to the videos on their way."""
        return contextlib.nullcontext()

    @abstractmethod
    async def embed(self, chunk: Chunk) -> Chunk:
        """Embed the text of a chunk's frames."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the executor holds."""
