"""Stage pools on Ray Serve, and the executor that drives them.

Each stage runs as a Serve deployment with its own resources and replica bounds: Serve gives
per-replica resources, autoscaling on queue depth, health checks, replacement of failed
replicas and request backpressure. The ingest pool fetches, probes and decodes a video in one
replica (so the downloaded file is local to the decoder) and streams chunk tickets back; the
pixels stay in the object store (``ray.put`` in the decoder, ``ray.get`` in the image stage),
so they never pass through the orchestrating process. Model pools batch requests across videos
with ``@serve.batch``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Collection, Iterator
from dataclasses import replace
from typing import Any, cast

import ray
from ray import serve
from ray.exceptions import RayTaskError
from ray.serve import Application
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from core.config import PoolSettings, ServiceConfig
from core.errors import PermanentError, ReelsenseError
from core.records import Chunk, EarlierResult, VideoRef, VideoResult
from runtime.executor import ChunkTicket, IngestItem, StageExecutor, merge_outputs
from runtime.metrics import ActivitySnapshot, StageActivity, replica_name
from runtime.result_writer import FencedResultWriter
from stages.base import Stage
from stages.decode import ResumePoint
from stages.pipeline import Pipeline

log = logging.getLogger(__name__)

POOLS_APP = "reelsense-pools"
INGEST = "ingest"
FETCH = "fetch"
DECODE = "decode"
EMBED = "embed"
WRITER = "sink-writer"
_END = object()
# How long chunk refs stay held after a video's stream ends: the image stages take the last
# chunks within seconds; a crashed orchestrator's chunks are dropped after this.
_HOLD_AFTER_END_S = 120.0
_CLOSED_KEPT = 10_000
_FUSED_MAX_ONGOING = 4096


@ray.remote(num_cpus=0)
class ChunkCredits:
    """How many chunks each video's decoder may produce: the caller grants more as it takes
    chunks, so decoding runs at most a few chunks ahead of the stages. (A Serve streaming
    call has no backpressure of its own: the replica would decode the whole video into the
    object store however slowly the chunks are taken.)"""

    def __init__(self) -> None:
        self._granted: dict[str, int] = {}
        self._released: dict[str, list[int]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._closed: set[str] = set()
        self._closed_order: deque[str] = deque()

    async def wait(self, key: str, count: int) -> tuple[bool, list[int]]:
        """Until more than ``count`` chunks are granted; then whether the caller is still
        there, and the chunks whose pixels it no longer needs (since the last wait)."""
        while key not in self._closed and self._granted.get(key, 0) <= count:
            await self._changed.setdefault(key, asyncio.Event()).wait()
        return key not in self._closed, self._released.pop(key, [])

    def release(self, key: str, index: int) -> None:
        if key not in self._closed:
            self._released.setdefault(key, []).append(index)

    def grant(self, key: str, total: int) -> None:
        if key not in self._closed:
            self._granted[key] = max(self._granted.get(key, 0), total)
        self._wake(key)

    def close(self, key: str) -> None:
        self._granted.pop(key, None)
        self._released.pop(key, None)
        self._closed.add(key)
        self._closed_order.append(key)
        if len(self._closed_order) > _CLOSED_KEPT:  # a late waiter of an old key is unlikely
            self._closed.discard(self._closed_order.popleft())
        self._wake(key)

    def _wake(self, key: str) -> None:
        event = self._changed.pop(key, None)
        if event is not None:
            event.set()


class _StageRunner:
    """One stage set up in a replica, with its activity."""

    def __init__(self, stage: Stage[Chunk, Chunk]) -> None:
        self.stage = stage
        stage.setup()
        self.activity = StageActivity(stage.name, replica_name(stage.name))

    async def run(self, items: list[ChunkTicket | Chunk]) -> list[Chunk]:
        """The stage on the chunks (a ticket's pixels read from the object store); the chunks
        it returns carry no pixels."""
        chunks = [(await item.payload) if isinstance(item, ChunkTicket) else item for item in items]
        with self.activity.working(sum(len(chunk.frames) for chunk in chunks)) as work:
            done = await work.in_thread(self.stage.process_batch, chunks)
        return [chunk.without_images() for chunk in done]


def _later_stages(pipeline: Pipeline) -> dict[str, Stage[Chunk, Chunk]]:
    """The image stages and the embedder of the pipeline, by name."""
    stages: dict[str, Stage[Chunk, Chunk]] = {s.name: s for s in pipeline.image_stages}
    if pipeline.embed is not None:
        stages[pipeline.embed.name] = pipeline.embed
    return stages


class IngestPool:
    """Fetch + probe + decode/sample; one generator per video. Fused stages
    (``PoolSettings.fuse``) run here too, on each chunk as it is decoded."""

    def __init__(self, config_json: str) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        pipeline = Pipeline.from_config(config)
        self._fetch = pipeline.fetch
        self._decode = pipeline.decode
        self._fetch.setup()
        self._decode.setup()
        replica = replica_name(INGEST)
        self._activity = {
            FETCH: StageActivity(FETCH, replica),
            DECODE: StageActivity(DECODE, replica),
        }
        self._image_stages = [stage.name for stage in pipeline.image_stages]
        self._fused = {
            name: _StageRunner(stage)
            for name, stage in _later_stages(pipeline).items()
            if name in config.ray.fused
        }
        # Chunk refs this replica put, held until the caller releases them (its image stages
        # are done with the pixels) or a while after the video's stream ends: a ref nested in
        # a value a streaming call yields can otherwise be freed before the image stage reads
        # it (Ray loses count of such borrowed refs). Released refs go at once, so what is
        # held stays bounded by the chunks in flight, whatever the length of the video.
        self._held: dict[str, dict[int, ray.ObjectRef[Any]]] = {}

    async def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        credits: Any = None,
        key: str = "",
        inline: tuple[str, ...] = (),
    ) -> AsyncIterator[IngestItem]:
        """``credits`` (a ``ChunkCredits`` handle) and ``key``: wait for a grant before each
        chunk; None decodes as fast as it can. ``inline``: fused stages to run on each chunk
        (the image stages first, then the embedder)."""
        with self._activity[FETCH].working(1) as work:
            video = (await work.in_thread(self._fetch.process_batch, [ref]))[0]
        yield video
        hold = uuid.uuid4().hex
        held: dict[int, ray.ObjectRef[Any]] = {}
        self._held[hold] = held
        # Pixels go to the object store unless every image stage runs here.
        pixels = not set(self._image_stages) <= set(inline)
        try:
            chunks: Iterator[Chunk] = self._decode.stream_from(video, resume)
            produced = 0
            while True:
                if credits is not None:
                    still_wanted, released = await credits.wait.remote(key, produced)
                    for index in released:
                        held.pop(index, None)
                    if not still_wanted:
                        return
                with self._activity[DECODE].working() as work:
                    chunk = await work.in_thread(next, chunks, _END)
                    work.items = len(chunk.frames) if isinstance(chunk, Chunk) else 0
                if chunk is _END:
                    return
                assert isinstance(chunk, Chunk)
                ticket = ChunkTicket(
                    chunk.video_id, chunk.index, len(chunk.frames), chunk.last, payload=None
                )
                if inline:
                    ticket = await self._run_inline(ticket, chunk, inline)
                if pixels:
                    held[chunk.index] = ticket_ref = ray.put(chunk)
                    ticket = replace(ticket, payload=ticket_ref)
                produced += 1
                yield ticket
        finally:
            asyncio.get_running_loop().call_later(_HOLD_AFTER_END_S, self._held.pop, hold, None)
            await asyncio.to_thread(self._fetch.release, video)

    async def _run_inline(
        self, ticket: ChunkTicket, chunk: Chunk, inline: tuple[str, ...]
    ) -> ChunkTicket:
        outputs: list[Chunk] = []
        seconds: dict[str, float] = {}

        async def run(name: str, on: Chunk) -> Chunk:
            started = time.monotonic()
            try:
                (done,) = await self._fused[name].run([on])
            except PermanentError as exc:
                exc.stage = name  # type: ignore[attr-defined]
                raise
            seconds[name] = time.monotonic() - started
            return done

        for name in inline:
            if name != EMBED:
                outputs.append(await run(name, chunk))
        analysed = merge_outputs(outputs)
        if EMBED in inline:
            analysed = await run(EMBED, analysed)
        return replace(ticket, applied=frozenset(inline), analysed=analysed, seconds=seconds)

    async def analyse(self, stage: str, item: ChunkTicket | Chunk) -> Chunk:
        """A fused stage on one chunk, called as a pool's would be (when a video reuses some
        outputs of an earlier result, the stages left run on their own)."""
        return (await self._fused[stage].run([item]))[0]

    def activity(self, since: int = 0) -> list[ActivitySnapshot]:
        runners = self._fused.values()
        activities = [*self._activity.values(), *(runner.activity for runner in runners)]
        return [activity.snapshot(since) for activity in activities]

    def held(self) -> int:
        """Chunk refs this replica holds (pixels in the object store kept for readers)."""
        return sum(len(held) for held in self._held.values())

    def __del__(self) -> None:
        for runner in self._fused.values():
            runner.stage.teardown()


class ModelPool:
    """One model stage (OCR, VLM, embeddings), batching chunks of many videos together."""

    def __init__(self, config_json: str, stage: str) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        self._runner = _StageRunner(_later_stages(Pipeline.from_config(config))[stage])
        pool: PoolSettings = getattr(config.ray, stage)
        self.process.set_max_batch_size(pool.max_batch_size)  # type: ignore[attr-defined]
        self.process.set_batch_wait_timeout_s(pool.batch_wait_timeout_s)  # type: ignore[attr-defined]

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.02)  # type: ignore[untyped-decorator]
    async def process(self, items: list[ChunkTicket | Chunk]) -> list[Chunk]:
        return await self._runner.run(items)

    def activity(self, since: int = 0) -> list[ActivitySnapshot]:
        return [self._runner.activity.snapshot(since)]

    def __del__(self) -> None:
        self._runner.stage.teardown()


class SinkWriterPool:
    """The one writer of the Lance tables (a single replica): many videos per commit. It is
    also the ingress of the pools application: called, it names the stage pools it runs."""

    def __init__(self, config_json: str, stages: list[str], *pools: DeploymentHandle[Any]) -> None:
        config = ServiceConfig.model_validate_json(config_json)
        self._writer = FencedResultWriter(config)
        # ``pools`` are bound only so that Serve deploys them.
        self._stages = {name: name in config.ray.fused for name in stages}

    def __call__(self) -> dict[str, bool]:
        """Stage -> whether it runs in the decode replicas (fused)."""
        return self._stages

    async def write(self, result: VideoResult) -> None:
        await self._writer.write(result)

    async def earlier(self, video_id: str) -> EarlierResult | None:
        return await self._writer.earlier(video_id)

    async def __del__(self) -> None:
        await self._writer.close()


def pools_application(config: ServiceConfig) -> Application:
    """Every stage pool and the sink writer, as the one Serve application ``POOLS_APP``."""
    pipeline = Pipeline.from_config(config)
    config_json = config.to_replica_json()
    ingest_options = _deployment_options(config.ray.decode, INGEST)
    if config.ray.fused:
        # A decode stream holds its request for a whole video and waits for its chunks to be
        # taken; calls of fused stages routed here (a reused result's stages, an embedder that
        # reads a pooled VLM's captions) are what finish those chunks. Under one cap for both,
        # streams can take every slot and starve the calls for good. Streams stay bounded by
        # the consumers' videos in flight, and Serve spreads them over the replicas.
        ingest_options["max_ongoing_requests"] = _FUSED_MAX_ONGOING
    ingest = serve.deployment(**ingest_options)(IngestPool)
    pools = [ingest.bind(config_json)]
    names = [stage.name for stage in pipeline.image_stages]
    if pipeline.embed is not None:
        names.append(pipeline.embed.name)
    for name in names:
        if name in config.ray.fused:
            continue  # runs in the ingest replicas
        pool = serve.deployment(**_deployment_options(getattr(config.ray, name), name))(ModelPool)
        pools.append(pool.bind(config_json, name))
    writer = serve.deployment(
        name=WRITER,
        num_replicas=1,
        max_ongoing_requests=256,  # every waiting video joins the next commit
        ray_actor_options={"num_cpus": 0.05},
    )(SinkWriterPool)
    # The writer is the ingress: one process fewer than a deployment of its own for that.
    return writer.bind(config_json, names, *pools)


def _deployment_options(pool: PoolSettings, name: str) -> dict[str, Any]:
    options: dict[str, Any] = {
        "name": name,
        "ray_actor_options": {
            "num_cpus": pool.num_cpus,
            "num_gpus": pool.num_gpus,
            **({"memory": pool.memory_mb * 1024 * 1024} if pool.memory_mb else {}),
        },
        "max_ongoing_requests": max(pool.max_batch_size * 2, 4),
    }
    if pool.max_replicas > pool.min_replicas:
        options["autoscaling_config"] = {
            "min_replicas": pool.min_replicas,
            "max_replicas": pool.max_replicas,
            "target_ongoing_requests": pool.max_batch_size,
        }
    else:
        options["num_replicas"] = pool.min_replicas
    return options


class RayExecutor(StageExecutor):
    """Drives the Serve stage pools from the orchestrating process."""

    def __init__(self, stages: dict[str, bool], *, decode_ahead: int = 2) -> None:
        """``stages``: stage -> whether it is fused into the ingest replicas."""
        self._ingest = serve.get_deployment_handle(INGEST, app_name=POOLS_APP)
        self._decode_ahead = decode_ahead
        self._credits = ChunkCredits.remote()  # type: ignore[attr-defined]
        self._writer = serve.get_deployment_handle(WRITER, app_name=POOLS_APP)
        self._pools = {
            name: serve.get_deployment_handle(name, app_name=POOLS_APP)
            for name, fused in stages.items()
            if not fused
        }
        self.inline = frozenset(name for name, fused in stages.items() if fused)
        self.embeds = EMBED in stages
        self.image_stages = tuple(name for name in stages if name != EMBED)

    @classmethod
    def deploy(cls, config: ServiceConfig) -> RayExecutor:
        """Deploy (or update) the pools application; returns once every pool runs."""
        ingress = serve.run(
            pools_application(config),
            name=POOLS_APP,
            route_prefix=None,
            logging_config={"log_level": "WARNING"},
        )
        stages = ingress.remote().result(timeout_s=120)
        return cls(stages, decode_ahead=config.runtime.decode_ahead_chunks)

    @classmethod
    def connect(cls, config: ServiceConfig | None = None) -> RayExecutor:
        """Use the pools another process deployed (a RayService, or a ``reelsense serve``)."""
        stages = serve.get_app_handle(POOLS_APP).remote().result(timeout_s=120)
        return cls(stages, decode_ahead=config.runtime.decode_ahead_chunks if config else 2)

    async def ingest(
        self, ref: VideoRef, resume: ResumePoint | None = None, inline: Collection[str] = ()
    ) -> AsyncIterator[IngestItem]:
        # Chunks are granted as the caller takes them: decoding stays ``decode_ahead`` chunks
        # ahead of what the orchestration has taken, so the pixels in the object store stay
        # bounded whatever the length of the video.
        key = uuid.uuid4().hex
        self._credits.grant.remote(key, self._decode_ahead)
        stream = cast(
            DeploymentResponseGenerator[IngestItem],
            self._ingest.options(stream=True).ingest.remote(
                ref, resume, self._credits, key, tuple(inline)
            ),
        )
        taken = 0
        try:
            async for item in stream:
                if not isinstance(item, ChunkTicket):
                    yield item
                    continue
                yield replace(item, stream=key)
                taken += 1
                self._credits.grant.remote(key, taken + self._decode_ahead)
        except RayTaskError as exc:
            raise _cause(exc) from None
        finally:
            self._credits.close.remote(key)

    async def activity(self) -> dict[str, list[ActivitySnapshot]]:
        """Stage -> a snapshot of each running replica (a broadcast to every pool)."""
        by_stage: dict[str, list[ActivitySnapshot]] = {}
        for handle in (self._ingest, *self._pools.values()):
            replies = await handle.broadcast("activity").results_async()
            for reply in replies:
                for snapshot in reply:
                    by_stage.setdefault(snapshot.stage, []).append(snapshot)
        return by_stage

    async def analyse(self, stage: str, ticket: ChunkTicket) -> Chunk:
        return await self._stage(stage, ticket)

    def release(self, ticket: ChunkTicket) -> None:
        if ticket.stream and ticket.payload is not None:
            self._credits.release.remote(ticket.stream, ticket.index)

    async def embed(self, chunk: Chunk) -> Chunk:
        return await self._stage(EMBED, chunk)

    async def _stage(self, stage: str, item: ChunkTicket | Chunk) -> Chunk:
        """One stage on one chunk: in its pool, or in an ingest replica when fused."""
        pool = self._pools.get(stage)
        try:
            if pool is None:
                result: Chunk = await self._ingest.analyse.remote(stage, item)
            else:
                result = await pool.process.remote(item)
        except RayTaskError as exc:
            raise _cause(exc) from None
        return result

    async def write(self, result: VideoResult) -> None:
        try:
            await self._writer.write.remote(result)
        except RayTaskError as exc:
            raise _cause(exc) from None

    async def earlier(self, video_id: str) -> EarlierResult | None:
        try:
            found: EarlierResult | None = await self._writer.earlier.remote(video_id)
        except RayTaskError as exc:
            raise _cause(exc) from None
        return found

    async def close(self) -> None:
        ray.kill(self._credits)


def _cause(exc: RayTaskError) -> BaseException:
    """The stage's own error, so reason codes and retry decisions survive the trip through Ray."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, ReelsenseError) else exc
