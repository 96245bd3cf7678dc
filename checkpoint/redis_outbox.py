"""The outbox stream of the Redis checkpoint store, read by notifiers in a consumer group.

Final transitions append their outbox entry inside their Lua script (``checkpoint/redis_store.py``);
this reads them back: each notifier (a consumer of the group) its own unacknowledged entries
first, then new ones; entries another consumer left unacknowledged too long are taken over;
delivered entries are acknowledged and deleted, so the stream holds only work. An entry that
does not decode is moved to ``{stream}:dead`` instead of being handed out for ever.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc

from checkpoint.base import OutboxEvent
from checkpoint.redis_wire import boundary, stream_entries
from checkpoint.scripts import load_script
from core.config import RedisSettings

log = logging.getLogger(__name__)


class RedisOutbox:
    """Reads of the outbox stream ``stream`` for ``RedisCheckpointStore`` (its client)."""

    def __init__(self, redis: aioredis.Redis, stream: str, settings: RedisSettings) -> None:
        self._redis = redis
        self._stream = stream
        self._group = settings.outbox_group
        self._socket_timeout_s = settings.socket_timeout_s
        self._hold_script = redis.register_script(load_script("hold_outbox", alone=True))
        self._group_ready = False
        # consumer -> id after which its earlier pending entries are still to be read (None
        # once all were read), see ``read``.
        self._pending_after: dict[str, str | None] = {}

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            # From id 0, not $: entries appended before the group existed must be delivered too.
            await self._redis.xgroup_create(self._stream, self._group, id="0", mkstream=True)
        except rexc.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def _read_group(
        self, consumer: str, from_id: str, count: int, block_ms: int | None
    ) -> list[tuple[str, dict[str, str] | None]]:
        for attempt in (1, 2):
            await self._ensure_group()
            try:
                reply = await self._redis.xreadgroup(
                    self._group,
                    consumer,
                    {self._stream: from_id},
                    count=count,
                    block=block_ms,
                )
                return stream_entries(reply)
            except rexc.ResponseError as exc:
                # The stream (and with it the group) was deleted: make the group again, once.
                if "NOGROUP" not in str(exc) or attempt == 2:
                    raise
                self._group_ready = False
        return []

    async def _decode(
        self, entries: list[tuple[str, dict[str, str] | None]]
    ) -> list[tuple[str, OutboxEvent]]:
        good: list[tuple[str, OutboxEvent]] = []
        bad: list[tuple[str, dict[str, str] | None]] = []
        for entry_id, fields in entries:
            try:
                good.append((entry_id, OutboxEvent.model_validate_json((fields or {})["event"])))
            except (KeyError, ValueError):
                bad.append((entry_id, fields))
        if bad:
            # A poison entry would be redelivered forever: park it where an operator can look.
            log.error("moving %d undecodable outbox entries to %s:dead", len(bad), self._stream)
            async with self._redis.pipeline(transaction=True) as pipe:
                for entry_id, fields in bad:
                    dead: dict[Any, Any] = {"id": entry_id, **(fields or {})}
                    pipe.xadd(f"{self._stream}:dead", dead)
                ids = [entry_id for entry_id, _ in bad]
                pipe.xack(self._stream, self._group, *ids)
                pipe.xdel(self._stream, *ids)
                await pipe.execute()
        return good

    async def read(
        self, consumer: str, *, count: int = 16, block_ms: int = 1000
    ) -> list[tuple[str, OutboxEvent]]:
        """This consumer's unacknowledged entries first, then new ones (waiting up to
        ``block_ms``; 0 or less does not wait, and the wait is kept below the socket
        timeout). Entries stay pending until ``ack``: delivery is at-least-once."""
        wait = min(block_ms, int(self._socket_timeout_s * 1000) - 500)
        async with boundary():
            # The entries left pending by an earlier life of this consumer are paged through
            # once; after that only new ones are read, so an entry that stays pending while
            # its delivery waits for a retry does not hold back the entries behind it.
            after = self._pending_after.get(consumer, "0")
            if after is not None:
                entries = await self._read_group(consumer, after, count, None)
                if entries:
                    self._pending_after[consumer] = entries[-1][0]
                    return await self._decode(entries)
                self._pending_after[consumer] = None
            entries = await self._read_group(consumer, ">", count, wait if wait > 0 else None)
            return await self._decode(entries)

    def rewind(self, consumer: str) -> None:
        self._pending_after.pop(consumer, None)

    async def reclaim(
        self, consumer: str, min_idle_ms: int, *, count: int = 16
    ) -> list[tuple[str, OutboxEvent]]:
        """Take over entries another consumer read but left unacknowledged for at least
        ``min_idle_ms`` (it crashed or hangs); they become this consumer's pending entries."""
        claimed: list[tuple[str, dict[str, str] | None]] = []
        start = "0-0"
        async with boundary():
            await self._ensure_group()
            while len(claimed) < count:
                reply = await self._redis.xautoclaim(
                    self._stream,
                    self._group,
                    consumer,
                    min_idle_ms,
                    start_id=start,
                    count=count - len(claimed),
                )
                start = str(reply[0])
                claimed.extend((str(i), f or None) for i, f in reply[1] if i is not None)
                if start == "0-0":
                    break
            return await self._decode(claimed)

    async def hold(self, consumer: str, entry_ids: list[str]) -> list[str]:
        """Renew ``consumer``'s hold on the entries it works on, so ``reclaim`` of
        another consumer does not take them over while it lives; the ids still held (an entry
        another consumer took over meanwhile is no longer this one's)."""
        if not entry_ids:
            return []
        async with boundary():
            held = await self._hold_script(
                keys=[self._stream],
                args=[self._group, consumer, *entry_ids],
            )
        return [str(i) for i in held]

    async def ack(self, entry_ids: list[str]) -> None:
        """Acknowledge delivered entries and delete them, so the stream only holds work."""
        if not entry_ids:
            return
        async with boundary(), self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(self._stream, self._group, *entry_ids)
            pipe.xdel(self._stream, *entry_ids)
            await pipe.execute()
