"""``RayExecutor``: the orchestration's side of the pools application."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import AbstractContextManager
from typing import Any

import ray
from ray import serve
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from core.config import ServiceConfig
from core.records import Chunk, VideoRef
from core.stage_names import EMBED
from runtime.activity import ActivitySnapshot
from runtime.executor import IngestItem, PooledChunk, StageExecutor
from runtime.pools.application import pool_stages, pools_application
from runtime.pools.base import INGEST, POOLS_APP
from runtime.pools.errors import pool_call
from runtime.pools.fit import check_fit
from runtime.pools.ingest import ChunkCredits
from runtime.pools.split import SplitIngest
from stages.pipeline import Pipeline
from stages.sampling import ResumePoint


class RayExecutor(StageExecutor):
    """Drives the Serve stage pools from the orchestrating process."""

    def __init__(
        self,
        stages: dict[str, bool],
        *,
        decode_ahead: int = 2,
        split_over: int = 0,
        call_timeout_s: float = 300.0,
    ) -> None:
        """``stages``: stage -> whether it is fused into the ingest replicas
        (``runtime.pools.application.pool_stages``). ``split_over``: the ingest replicas a
        video alone may be split over (``runtime.pools.split``). ``call_timeout_s``: the
        deadline of a stage call on one chunk."""
        self._call_s = call_timeout_s
        self._ingest = serve.get_deployment_handle(INGEST, app_name=POOLS_APP)
        self._credits: Any | None = None
        self._split = SplitIngest(
            self._ingest, self._chunk_credits, ahead=decode_ahead, replicas=split_over
        )
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
        """Deploy (or update) the pools application; returns once every pool runs. Raises
        ``PoolsDoNotFit`` first where they cannot all be placed (``runtime.pools.fit``)."""
        pipeline = Pipeline.from_config(config)
        check_fit(config, pipeline)
        serve.run(
            pools_application(config, pipeline),
            name=POOLS_APP,
            route_prefix=None,
            logging_config={"log_level": "WARNING"},
        )
        return cls(pool_stages(config), **_options(config))

    @classmethod
    def connect(cls, config: ServiceConfig) -> RayExecutor:
        """Use the pools another process deployed (a RayService, or a ``reelsense serve``) of
        the same ``config``."""
        serve.get_app_handle(POOLS_APP)  # raises when no such application runs
        return cls(pool_stages(config), **_options(config))

    def _chunk_credits(self) -> Any:
        """The actor that paces decoding, started with the first paced call: with every image
        stage fused into the decoder (the ``per_core`` profile) no call is paced, and an idle
        actor still costs a process its periodic work."""
        if self._credits is None:
            # On this process's node: the credits are this process's alone, and Ray would place
            # them on any node of a cluster (they ask for no CPU), whose loss would then fail
            # every video this process decodes from that moment on.
            node = ray.get_runtime_context().get_node_id()
            here = NodeAffinitySchedulingStrategy(node, soft=False)
            self._credits = ChunkCredits.options(scheduling_strategy=here).remote()  # type: ignore[attr-defined]
        return self._credits

    def ingest(
        self,
        ref: VideoRef,
        resume: ResumePoint | None = None,
        inline: Collection[str] = (),
        speech_from: int | None = None,
    ) -> AsyncIterator[IngestItem]:
        # Every image stage in the decoder: no pixels cross, nothing to pace.
        paced = not inline or not set(self.image_stages) <= set(inline)
        return self._split.ingest(ref, resume, inline, speech_from, paced=paced)

    def taking_on(self) -> AbstractContextManager[None]:
        return self._split.taking_on()

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
        if ticket.stream and self._credits is not None:
            self._credits.release.remote(ticket.stream, ticket.index)

    async def embed(self, chunk: Chunk) -> Chunk:
        return await self._stage(EMBED, chunk)

    async def _stage(self, stage: str, item: PooledChunk | Chunk) -> Chunk:
        """One stage on one chunk: in its pool, or in an ingest replica when fused."""
        pool = self._pools.get(stage)
        async with pool_call(stage, self._call_s):
            if pool is None:
                result: Chunk = await self._ingest.analyse.remote(stage, item)
            else:
                result = await pool.process.remote(item)
        return result

    async def close(self) -> None:
        if self._credits is not None:
            ray.kill(self._credits)


def _options(config: ServiceConfig) -> dict[str, Any]:
    """The executor's settings from the config: a video is split over the ingest replicas
    only where it may be (``ray.split_min_s`` above 0)."""
    ray = config.ray
    return {
        "decode_ahead": config.runtime.decode_ahead_chunks,
        "split_over": ray.decode.max_replicas if ray.split_min_s > 0 else 0,
        "call_timeout_s": ray.call_timeout_s,
    }
