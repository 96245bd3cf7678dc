"""Redis under Sentinel on one machine: a Valkey primary (WAITAOF), its replica and one
Sentinel on 127.0.0.1, stopped by PID; for the failover test and the crash soak.

``fail_over`` is what a crashed primary looks like to the service: kill -9 of the primary,
Sentinel's promotion of the replica, and the old primary started again, which Sentinel then
turns into the new primary's replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Self

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from devkit.base import LocalPart
from devkit.services import redis_server, sentinel, valkey_binary

MASTER = "reelsense"


class SentinelRedis(LocalPart):
    """The three processes under ``root``; ``settings()`` points a service at them."""

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

    def start(self) -> Self:
        try:
            for part in (self.primary, self.replica, self.sentinel):
                part.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for part in (self.sentinel, self.replica, self.primary):
            part.stop()

    def settings(self, *, replicas_to_confirm: int = 1) -> dict[str, object]:
        """The ``redis`` section of a service on this Redis, following it through Sentinel."""
        return {
            "url": f"redis://127.0.0.1:{self.primary.port}/0",
            "sentinels": [f"127.0.0.1:{self.sentinel.port}"],
            "sentinel_master": MASTER,
            "replicas_to_confirm": replicas_to_confirm,
            "aof_wait_timeout_ms": 1000,  # a replica fsyncing every second answers within it
        }

    async def primary_port(self) -> int:
        """The port of the primary, as Sentinel names it now."""
        client = aioredis.Redis(host="127.0.0.1", port=self.sentinel.port, decode_responses=True)
        try:
            _, port = await client.execute_command(  # type: ignore[no-untyped-call]
                "SENTINEL", "get-master-addr-by-name", MASTER
            )
            return int(port)
        finally:
            await client.aclose()

    async def replicas_online(self, port: int) -> int:
        client = aioredis.Redis(host="127.0.0.1", port=port, decode_responses=True)
        try:
            return int((await client.info("replication")).get("connected_slaves", 0))
        finally:
            await client.aclose()

    async def replicating(self, timeout_s: float = 120) -> None:
        """Until the primary Sentinel names has a replica online."""

        async def online() -> bool:
            return await self.replicas_online(await self.primary_port()) >= 1

        await _until("a replica online", online, timeout_s)

    async def fail_over(self, timeout_s: float = 120) -> int:
        """kill -9 of the primary, until Sentinel has promoted the replica; the old primary
        started again (as the new one's replica, once Sentinel has turned it). Returns the port
        Sentinel promoted (on a starved machine Sentinel may fail over again later, back to
        the restarted one)."""
        old = await self.primary_port()
        dead, alive = (
            (self.primary, self.replica)
            if old == self.primary.port
            else (self.replica, self.primary)
        )
        await asyncio.to_thread(dead.kill)

        async def promoted() -> bool:
            return await self.primary_port() == alive.port

        await _until("failed over", promoted, timeout_s)
        await asyncio.to_thread(dead.start, timeout_s=60)
        await self.replicating(timeout_s)
        return alive.port


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    """Until ``check`` holds; a server that does not answer (yet) is a no."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, RedisError):
            if await check():
                return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"never {what}")
