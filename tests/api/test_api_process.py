"""On a local Ray the service serves its API from its own process: no Serve replica and no
Serve proxy (two processes fewer), the same API at the same address."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
from ray import serve

from api.serve import API_APP
from core.config import ServiceConfig
from core.errors import ReelsenseError
from devkit.services import free_port
from runtime.ray_pools import POOLS_APP
from runtime.service import ReelsenseService
from tests.e2e.support import service_config, webhook_secret

pytestmark = pytest.mark.slow


def _config(
    tmp_path: Path, bootstrap: str, redis_url: str, unique: str, port: int
) -> ServiceConfig:
    return service_config(
        tmp_path,
        bootstrap=bootstrap,
        redis_url=redis_url,
        unique=unique,
        api_port=port,
        hook_url="http://127.0.0.1:9/unused",
        secret=webhook_secret(),
    )


async def test_the_api_is_served_by_the_service_process_on_a_local_ray(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, serve_apps: None, unique: str
) -> None:
    config = _config(tmp_path, kafka_bootstrap, redis_url, unique, free_port())
    assert config.ray.address is None
    assert config.api.in_service_process is None
    service = ReelsenseService(config)
    await service.start()
    running = asyncio.create_task(service.run())
    try:
        status = serve.status()
        assert POOLS_APP in status.applications
        assert API_APP not in status.applications
        assert not status.proxies  # nothing of Serve's listens for HTTP
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{config.api.port}") as client:
            assert (await client.get("/healthz")).status_code == 200
            missing = await client.get("/v1/videos/never-seen")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "not_found"
    finally:
        service.request_stop()
        await running
    with pytest.raises(httpx.ConnectError):  # stopped with the service
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{config.api.port}/healthz")


async def test_a_taken_api_port_fails_the_start_and_leaves_nothing_running(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, serve_apps: None, unique: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = ReelsenseService(_config(tmp_path, kafka_bootstrap, redis_url, unique, port))
        with pytest.raises(ReelsenseError, match=f"cannot listen on http://127.0.0.1:{port}"):
            await service.start()
    assert POOLS_APP not in serve.status().applications  # the pools it deployed went with it
