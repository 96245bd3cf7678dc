"""``RayExecutor``: the orchestration's side of the pools application."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Collection
from dataclasses import replace
from typing import cast

import ray
from ray import serve
from ray.exceptions import RayTaskError
from ray.serve.handle import DeploymentResponseGenerator

from core.config import ServiceConfig
from core.errors import ReelsenseError
from core.records import Chunk, EarlierResult, LocalVideo, VideoRef, VideoResult
from core.speech import SpeechEnd, SpeechPart
from core.stage_names import EMBED
from runtime.executor import IngestItem, PooledChunk, StageExecutor
from runtime.metrics import ActivitySnapshot
from runtime.pools.application import pools_application
from runtime.pools.base import INGEST, POOLS_APP, WRITER
from runtime.pools.ingest import ChunkCredits
from stages.sampling import ResumePoint


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
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        inline: Collection[str] = (),
        speech_from: int | None = None,
    ) -> AsyncIterator[IngestItem]:
        # Chunks are granted as the caller takes them: decoding stays ``decode_ahead`` chunks
        # ahead of what the orchestration has taken, so the pixels in the object store stay
        # bounded whatever the length of the video.
        key = uuid.uuid4().hex
        self._credits.grant.remote(key, self._decode_ahead)
        stream = cast(
            DeploymentResponseGenerator[IngestItem],
            self._ingest.options(stream=True).ingest.remote(
                ref,
                resume,
                credits=self._credits,
                key=key,
                inline=tuple(inline),
                speech_from=speech_from,
            ),
        )
        taken = 0
        try:
            async for item in stream:
                if isinstance(item, LocalVideo | SpeechPart | SpeechEnd):
                    yield item
                    continue
                # A pooled chunk names its stream: ``release`` lets its decoder drop the pixels.
                yield replace(item, stream=key) if isinstance(item, PooledChunk) else item
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

    async def analyse(self, stage: str, ticket: PooledChunk) -> Chunk:
        return await self._stage(stage, ticket)

    def release(self, ticket: PooledChunk) -> None:
        if ticket.stream:
            self._credits.release.remote(ticket.stream, ticket.index)

    async def embed(self, chunk: Chunk) -> Chunk:
        return await self._stage(EMBED, chunk)

    async def _stage(self, stage: str, item: PooledChunk | Chunk) -> Chunk:
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

    async def write_partial(self, part: VideoResult) -> None:
        try:
            await self._writer.write_partial.remote(part)
        except RayTaskError as exc:
            raise _cause(exc) from None

    async def drop_partial(self, video_id: str) -> None:
        try:
            await self._writer.drop_partial.remote(video_id)
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
