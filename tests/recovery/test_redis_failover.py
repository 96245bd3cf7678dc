"""A Redis failover under Sentinel while the service works: the primary is killed with -9 mid
run, Sentinel promotes its replica, the service follows the new primary, and with
``redis.replicas_to_confirm`` 1 no acknowledged final transition is lost: every video ends done,
once, with its webhook. The old primary, started again, comes back as the new one's replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bench.chaos_verify import (
    check_frames,
    check_webhooks,
    expected_timestamps_ms,
    read_statuses,
)
from checkpoint.base import VideoState
from devkit.service_run import ServiceRun
from devkit.services import redis_server, sentinel, valkey_binary
from devkit.workload import write_videos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

VIDEOS = 8
SECONDS_PER_SCENE = 4.0  # two scenes: 8 s, 8 samples at 1 fps
MASTER = "reelsense"


class Failover:
    """A Valkey primary (WAITAOF), its replica and one Sentinel, on loopback."""

    def __init__(self, root: Path) -> None:
        binary = valkey_binary()
        self.primary = redis_server(root / "primary", appendfsync="everysec", binary=binary)
        self.replica = redis_server(
            root / "replica",
            appendfsync="everysec",
            binary=binary,
            replica_of=self.primary.port,
        )
        self.sentinel = sentinel(root / "sentinel", self.primary.port, master=MASTER, binary=binary)

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        self.sentinel.start()

    def stop(self) -> None:
        for part in (self.sentinel, self.replica, self.primary):
            part.stop()

    async def primary_port(self) -> int:
        client = aioredis.Redis(host="127.0.0.1", port=self.sentinel.port, decode_responses=True)
        try:
            _, port = await client.execute_command("SENTINEL", "get-master-addr-by-name", MASTER)
            return int(port)
        finally:
            await client.aclose()

    async def replicas_online(self, port: int) -> int:
        client = aioredis.Redis(host="127.0.0.1", port=port, decode_responses=True)
        try:
            return int((await client.info("replication")).get("connected_slaves", 0))
        finally:
            await client.aclose()


@pytest.fixture
def failover(tmp_path: Path) -> Iterator[Failover]:
    parts = Failover(tmp_path / "redis")
    try:
        parts.start()
        yield parts
    finally:
        parts.stop()


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float = 120) -> None:
    """Until ``check`` holds; a server that does not answer (yet) is a no."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, RedisError):
            if await check():
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"never {what}")


async def test_a_killed_primary_under_sentinel_loses_no_final_transition(
    service_run: ServiceRun, failover: Failover
) -> None:
    run = service_run
    first = failover.primary.port

    async def replicating(port: int) -> bool:
        return await failover.replicas_online(port) == 1

    async def failed_over() -> bool:
        return await failover.primary_port() != first

    await _until("replicating", lambda: replicating(first))
    config = run.configure(
        redis={
            "url": f"redis://127.0.0.1:{first}/0",
            "sentinels": [f"127.0.0.1:{failover.sentinel.port}"],
            "sentinel_master": MASTER,
            "replicas_to_confirm": 1,
            "aof_wait_timeout_ms": 500,
        },
    )
    videos = write_videos(run.videos_dir, VIDEOS, seconds_per_scene=SECONDS_PER_SCENE)
    ids = sorted(videos)
    expected = {v: expected_timestamps_ms(2 * round(SECONDS_PER_SCENE * 10), 10, 1.0) for v in ids}
    service = run.start_process()
    await service.wait_healthy()
    await run.upload(videos)

    async def some_done() -> bool:
        states = [s.status for s in (await read_statuses(run.store, ids)).values()]
        return states.count(VideoState.DONE) >= 2

    await _until("any video done", some_done, timeout_s=240)
    failover.primary.kill()  # kill -9: what it acknowledged without the replica is gone
    await _until("failed over", failed_over)
    second = await failover.primary_port()
    failover.primary.start()  # back, and Sentinel makes it the new primary's replica
    await _until("the old primary replicating", lambda: replicating(second))

    statuses = await run.wait_final(ids, timeout_s=300)
    assert await run.wait_committed(timeout_s=120), await run.committed_and_end()
    await asyncio.sleep(3)  # deliveries of the last transitions
    assert await asyncio.to_thread(service.stop) == 0, service.log_tail()

    assert {v: s.status for v, s in statuses.items()} == dict.fromkeys(ids, VideoState.DONE)
    frames, rows = check_frames(config.storage.lance_uri, expected)
    assert frames["missing_rows"] == 0, frames
    assert frames["duplicate_rows"] == 0, frames
    assert all(statuses[v].frames == rows[v] for v in ids)
    version = next(iter({s.pipeline_version for s in statuses.values()}))
    hooks = check_webhooks(run.receiver.requests, ids, version)
    assert hooks["lost_webhooks"] == 0, hooks
    assert hooks["duplicate_webhook_ids"] == 0, hooks
    assert hooks["webhooks_with_wrong_id"] == 0, hooks
