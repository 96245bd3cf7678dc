"""``RayResults``: the stored results through the writer replica of the pools application."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from core.config import ServiceConfig
from core.records import EarlierResult, VideoRef, VideoResult
from runtime.pools.base import POOLS_APP, WRITER
from runtime.pools.errors import pool_call
from runtime.results import ResultStore


class RayResults(ResultStore):
    """Calls the sink writer replica (``runtime.pools.model.SinkWriterPool``); what a call
    raises is mapped by ``runtime.pools.errors.pool_call``."""

    def __init__(
        self,
        writer: DeploymentHandle[Any],
        *,
        call_timeout_s: float = 300.0,
        write_timeout_s: float = 600.0,
    ) -> None:
        """The deadlines: of a write (final, partial, forget), of the writer's other calls."""
        self._writer = writer
        self._call_s = call_timeout_s
        self._write_s = write_timeout_s

    @classmethod
    def connect(cls, config: ServiceConfig) -> RayResults:
        """The writer of the pools application running now (deployed by this process or
        another), with the deadlines of ``config``."""
        return cls(
            serve.get_deployment_handle(WRITER, app_name=POOLS_APP),
            call_timeout_s=config.ray.call_timeout_s,
            write_timeout_s=config.ray.write_timeout_s,
        )

    async def earlier(self, video_id: str) -> EarlierResult | None:
        async with pool_call("earlier result", self._call_s):
            found: EarlierResult | None = await self._writer.earlier.remote(video_id)
        return found

    async def write_partial(self, parts: Sequence[VideoResult]) -> None:
        async with pool_call("partial write", self._write_s):
            await self._writer.write_partial.remote(list(parts))

    async def drop_partial(self, video_id: str) -> None:
        async with pool_call("partial drop", self._call_s):
            await self._writer.drop_partial.remote(video_id)

    async def write(self, result: VideoResult) -> None:
        async with pool_call("write", self._write_s):
            await self._writer.write.remote(result)

    async def forget(self, videos: Sequence[VideoRef]) -> None:
        async with pool_call("forget", self._write_s):
            await self._writer.forget.remote(list(videos))
