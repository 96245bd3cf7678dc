"""On a local Ray the service serves its API from its own process: no Serve replica and no
Serve proxy (two processes fewer), the same API at the same address."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from ray import serve

from api.serve import API_APP
from core.config import ServiceConfig
from core.errors import ReelsenseError
from devkit.run_config import service_config, webhook_secret
from devkit.services import free_port
from runtime.pools.base import POOLS_APP
from runtime.service import ReelsenseService

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
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_url: str,
    serve_apps: None,
    unique: str,
    caplog: pytest.LogCaptureFixture,
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

            # An invalid event shows as failed here, and the service logs it once at WARNING
            # (the consumer, the handler and the processor each see it).
            caplog.clear()
            await _publish(config, key=b"broken-event", value=b'{"video_id": "broken-event"}')
            failed = await _status_when_final(client, "broken-event")
            assert (failed["status"], failed["error_code"]) == ("failed", "event_invalid")
            warned = [
                r.getMessage()
                for r in caplog.records
                if r.levelno >= logging.WARNING
                and ("invalid event" in r.getMessage() or "broken-event" in r.getMessage())
            ]
            assert len(warned) == 1, warned
    finally:
        service.request_stop()
        await running
    with pytest.raises(httpx.ConnectError):  # stopped with the service
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{config.api.port}/healthz")


async def _publish(config: ServiceConfig, *, key: bytes, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(config.kafka.topic, value, key=key)
    finally:
        await producer.stop()


async def _status_when_final(client: httpx.AsyncClient, video_id: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        response = await client.get(f"/v1/videos/{video_id}")
        if response.status_code == 200 and response.json()["status"] in ("done", "failed"):
            body: dict[str, object] = response.json()
            return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"{video_id} did not finish within 60 s")


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
