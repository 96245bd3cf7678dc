"""What the Redis server can promise about an acknowledged write, and the confirming of the
writes an offset commit rests on.

A Kafka offset is committed once the video's final transition (done or failed, with its outbox
entry) is acknowledged, or once ``claim`` answers that it was made already. Redis must not lose
such a transition in a crash: its event is never read again, so the video would keep its last
saved state and its webhook would not go out. The store learns once what the server promises
(``Durability.check``: at service start, else at the first final transition or skip):

- ``waitaof``: AOF is on and the server has WAITAOF (Redis 7.2 or newer, Valkey). Each final
  transition and each skip is confirmed with ``WAITAOF 1 0 aof_wait_timeout_ms``; an error or
  a timeout is the retryable ``checkpoint_not_durable``, never a quiet step down.
- ``fsync_always``: AOF with ``appendfsync always``: Redis fsyncs a write before it answers,
  so there is nothing to wait for.
- ``relaxed``: neither, accepted because ``redis.require_durable`` is false (logged as a
  warning). Otherwise the server is refused with ``CheckpointNotDurable``.

WAITAOF waits for the last write of its own connection only: a transition repeated after a
timeout writes nothing, a skip only reads, and redis-py's pool may hand WAITAOF another
connection than the script's. So the transition, a barrier write (``{prefix}:durable``) and
WAITAOF go down one connection in one pipeline; the AOF is one log, so once the barrier is on
disk, everything written before it is too.

A primary's own disk does not survive a failover: the replica promoted may never have received
the transition. With ``redis.replicas_to_confirm`` N above 0, the wait also counts replicas:
``WAITAOF 1 N`` (on the replicas' disks too), or ``WAIT N`` where the server has no WAITAOF
(in the replicas' memory). Fewer replicas answering in time is ``checkpoint_not_durable`` as
well: the offset waits, and the video with it, until enough replicas are back.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript

from checkpoint.errors import CheckpointNotDurable, CheckpointUnavailable
from checkpoint.redis_wire import boundary
from core.config import RedisSettings
from core.errors import PermanentError

log = logging.getLogger("checkpoint.redis_store")


# Waits for the confirmation of a final transition that is written (each of
# ``aof_wait_timeout_ms``) before it is given up as ``checkpoint_not_durable``.
_CONFIRM_AGAIN = 5


class DurabilityMode(StrEnum):
    """What the server promises about an acknowledged write (see the module's docstring)."""

    WAITAOF = "waitaof"
    FSYNC_ALWAYS = "fsync_always"
    RELAXED = "relaxed"


class Durability:
    """The server's durability mode, learnt once, and the confirmed writes that rest on it."""

    def __init__(self, redis: aioredis.Redis, settings: RedisSettings) -> None:
        self._redis = redis
        self._settings = settings
        self._barrier = f"{settings.key_prefix}:durable"
        self.mode: DurabilityMode | None = None  # None until checked

    async def check(self) -> DurabilityMode:
        """Learn what the server promises; ``CheckpointNotDurable`` where it promises too
        little and ``redis.require_durable`` is set."""
        async with boundary():
            server = await self._redis.info("server")
            aof = int((await self._redis.info("persistence")).get("aof_enabled", 0)) == 1
        name = server.get("server_name", "redis")
        version = server.get(f"{name}_version") or server.get("redis_version", "unknown")
        fsync: str | None = None
        if aof and await self._waitaof_works():
            mode = DurabilityMode.WAITAOF
        elif aof and (fsync := await self._appendfsync()) == "always":
            mode = DurabilityMode.FSYNC_ALWAYS
        else:
            missing = (
                "AOF is off (appendonly no)"
                if not aof
                else "it has no WAITAOF and appendfsync is "
                + (fsync or "unknown (CONFIG GET appendfsync was refused)")
            )
            what = f"{name} {version} cannot confirm that a final transition is on disk: {missing}"
            if self._settings.require_durable:
                raise CheckpointNotDurable(
                    f"{what}. Use Redis 7.2 or newer (or Valkey) with appendonly yes, or set "
                    "appendfsync always, or accept the weaker guarantee with "
                    "redis.require_durable: false (REELSENSE_REDIS_REQUIRE_DURABLE=false)"
                )
            # everysec bounds the loss to about a second; AOF off or appendfsync no do not.
            lost = "up to about a second of" if fsync == "everysec" else "any number of"
            log.warning(
                "%s; running anyway (redis.require_durable is false): a Redis crash may lose "
                "%s final transitions, and such a video shows its last saved state and is "
                "redone only if its event is sent again",
                what,
                lost,
            )
            mode = DurabilityMode.RELAXED
        log.info("checkpoint durability on %s %s: %s", name, version, mode.value)
        self.mode = mode
        return mode

    @property
    def _waits(self) -> bool:
        return self.mode is DurabilityMode.WAITAOF or self._settings.replicas_to_confirm > 0

    async def run_final(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Run a final transition's script; its reply once the transition is on disk."""
        self.mode or await self.check()
        async with boundary():
            if not self._waits:
                return await script(keys=keys, args=args)
            async with self._redis.pipeline(transaction=False) as pipe:
                await script(keys=keys, args=args, client=pipe)
                replies, waited = await self._barrier_and_wait(pipe)
        try:
            self._confirmed(waited)
        except CheckpointUnavailable:
            # Written, not yet confirmed (a replica fsyncing every second, one reconnecting
            # after a failover): wait for the confirmation again rather than have the caller
            # redo a transition that is in; it is raised once these waits run out too.
            await self._confirm_again()
        return replies[0]

    async def _confirm_again(self) -> None:
        for attempt in range(1, _CONFIRM_AGAIN):
            try:
                await self.confirm()
                return
            except CheckpointUnavailable:
                if attempt == _CONFIRM_AGAIN - 1:
                    raise

    async def confirm(self) -> None:
        """Return once everything written so far is on disk (``claim`` answered skip: the
        offset is committed on a transition an earlier attempt may have left unconfirmed)."""
        self.mode or await self.check()
        if self._waits:
            async with boundary(), self._redis.pipeline(transaction=False) as pipe:
                _, waited = await self._barrier_and_wait(pipe)
            self._confirmed(waited)

    async def _barrier_and_wait(
        self, pipe: Pipeline, *, waitaof: bool | None = None
    ) -> tuple[list[Any], Any]:
        """Run what ``pipe`` holds, then the barrier and WAITAOF (``waitaof``, by default in
        that mode) or WAIT: the first replies, and the wait's reply or error (any other error
        is raised, for ``boundary`` to map)."""
        pipe.incr(self._barrier)
        replicas, timeout_ms = self._wait_for()
        if waitaof is None:
            waitaof = self.mode is DurabilityMode.WAITAOF
        if waitaof:
            pipe.execute_command("WAITAOF", 1, replicas, timeout_ms)
        else:
            pipe.execute_command("WAIT", replicas, timeout_ms)
        *replies, waited = await pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies[:-1], waited

    def _wait_for(self) -> tuple[int, int]:
        """The replicas to wait for, and for how long (ms)."""
        return self._settings.replicas_to_confirm, self._settings.aof_wait_timeout_ms

    async def _waitaof_works(self) -> bool:
        async with boundary(), self._redis.pipeline(transaction=False) as pipe:
            _, waited = await self._barrier_and_wait(pipe, waitaof=True)
        return not isinstance(waited, rexc.ResponseError)

    async def _appendfsync(self) -> str | None:
        """The fsync policy, or None where CONFIG is refused (managed Redis renames it)."""
        try:
            async with boundary():
                reply = await self._redis.config_get("appendfsync")
        except PermanentError:
            return None
        value = reply.get("appendfsync")
        return str(value) if value is not None else None

    def _confirmed(self, waited: Any) -> None:
        replicas, timeout_ms = self._wait_for()
        if isinstance(waited, Exception):
            why = f"WAITAOF failed ({waited})"
        elif isinstance(waited, list) and int(waited[0]) < 1:
            why = f"WAITAOF timed out after {timeout_ms} ms"
        elif (int(waited[1]) if isinstance(waited, list) else int(waited)) < replicas:
            why = f"fewer than {replicas} replicas confirmed it within {timeout_ms} ms"
        else:
            return
        raise CheckpointUnavailable(
            f"redis did not confirm the write on disk: {why}",
            code="checkpoint_not_durable",
            retry_after=1.0,
        )
