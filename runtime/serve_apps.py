"""Serve application builders for a RayService (``deploy/kuberay/rayservice.yaml``).

Each builder takes the ``args`` of its application in the Serve config; ``config`` is the path
of a ``ServiceConfig`` YAML file (secrets come from the environment).

- ``pools_app``: every stage pool and the sink writer (``runtime.pools``).
- ``consumers_app``: Kafka consumer replicas; each is one member of the consumer group and runs
  the per-video orchestration against the pools.
- ``api_app``: the progress API.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve
from ray.serve import Application

from api.serve import api_application
from core.config import ServiceConfig
from runtime.placement import placed
from runtime.pools.application import pools_application
from runtime.service import ReelsenseService

log = logging.getLogger(__name__)


def _config(args: dict[str, Any], *, exposed: bool = True) -> ServiceConfig:
    """The config named by ``args``; an application that serves the API or sends webhooks
    (``exposed``) refuses one that leaves either open by accident."""
    config = ServiceConfig.load(args.get("config"))
    if exposed:
        config.refuse_left_open()
    return config


def pools_app(args: dict[str, Any]) -> Application:
    # Placed as the consumers place it (``ReelsenseService``): they learn which stages are
    # fused from the same configuration, not from the pools.
    return pools_application(placed(_config(args, exposed=False)))


def api_app(args: dict[str, Any]) -> Application:
    return api_application(_config(args))


class ConsumerReplica:
    """One consumer-group member. Serve restarts it when its health check fails."""

    def __init__(self, config_json: str) -> None:
        self._service = ReelsenseService(
            ServiceConfig.model_validate_json(config_json), deploy=False
        )
        self._task: asyncio.Task[None] | None = None

    async def _ensure_running(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._service.run(), name="reelsense-consumer")

    async def check_health(self) -> None:
        """Serve calls this periodically; the first call starts the consumer."""
        await self._ensure_running()
        assert self._task is not None
        if self._task.done():
            error = self._task.exception()
            raise RuntimeError(f"the consumer stopped: {error!r}")

    async def __call__(self) -> dict[str, Any]:
        await self._ensure_running()
        return {"pipeline_version": self._service.pipeline_version}

    async def __del__(self) -> None:
        self._service.request_stop()
        if self._task is not None:
            await self._task


def consumers_app(args: dict[str, Any]) -> Application:
    config = _config(args)
    deployment = serve.deployment(
        name="consumer",
        num_replicas=int(args.get("replicas", 1)),
        ray_actor_options={"num_cpus": float(args.get("num_cpus", 0.25))},
        health_check_period_s=5,
        graceful_shutdown_timeout_s=config.runtime.drain_timeout_s + 10,
    )(ConsumerReplica)
    return deployment.bind(config.to_replica_json())
