"""Delivery logs: in memory (tests, one-process demo) and in Redis (the service, the API).

Redis layout, under ``{prefix}:notify:``
- ``attempts:{webhook_id}``  list of attempt JSON, oldest first, trimmed, expiring
- ``video:{video_id}``       set of the webhook ids sent about the video, expiring
- ``endpoints``              hash url -> endpoint state JSON
- ``dead``                   hash "{webhook_id} {target}" -> dead letter JSON
- ``dead:at``                sorted set of the same fields by time, for newest-first listing
- ``retries``                hash "{webhook_id} {target}" -> scheduled retry JSON
- ``retries:due``            sorted set of the same fields by due time (a taker's hold moves it)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from checkpoint.redis_clients import async_client
from core.config import NotifySettings, RedisSettings
from notify.base import DeadLetter, DeliveryAttempt, DeliveryLog, EndpointState, ScheduledRetry
from notify.errors import DeliveryLogUnavailable

T = TypeVar("T")


def _letter_field(webhook_id: str, target: str) -> str:
    return f"{webhook_id} {target}"


# Take the retries due by ARGV[1], at most ARGV[2], holding each until ARGV[3]: one script, so
# of several notifiers taking at once each retry goes to one.
_TAKE_DUE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local found = {}
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[2], id)
  if raw then
    redis.call('ZADD', KEYS[1], ARGV[3], id)
    table.insert(found, raw)
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return found
"""


def _stamped(state: EndpointState) -> EndpointState:
    return state.model_copy(update={"updated_at": datetime.now(UTC)})


class MemoryDeliveryLog(DeliveryLog):
    """Everything in dicts; gone with the process (its scheduled retries too)."""

    def __init__(self, *, max_attempts: int = 100) -> None:
        self._max_attempts = max_attempts
        self._attempts: dict[str, list[DeliveryAttempt]] = defaultdict(list)
        self._by_video: dict[str, set[str]] = defaultdict(set)
        self._endpoints: dict[str, EndpointState] = {}
        self._dead: dict[str, DeadLetter] = {}
        self._retries: dict[str, tuple[float, ScheduledRetry]] = {}  # id -> (due or held, it)

    async def record(self, attempt: DeliveryAttempt) -> None:
        kept = self._attempts[attempt.webhook_id]
        kept.append(attempt)
        del kept[: -self._max_attempts]
        self._by_video[attempt.video_id].add(attempt.webhook_id)

    async def attempts(self, webhook_id: str) -> list[DeliveryAttempt]:
        return list(self._attempts.get(webhook_id, ()))

    async def attempts_for_video(self, video_id: str) -> list[DeliveryAttempt]:
        found = [a for wid in self._by_video.get(video_id, ()) for a in self._attempts[wid]]
        return sorted(found, key=lambda a: a.at)

    async def endpoint(self, url: str) -> EndpointState | None:
        return self._endpoints.get(url)

    async def save_endpoint(self, state: EndpointState) -> None:
        self._endpoints[state.url] = state

    async def endpoints(self) -> list[EndpointState]:
        return list(self._endpoints.values())

    async def add_dead_letter(self, letter: DeadLetter) -> None:
        self._dead[_letter_field(letter.webhook_id, letter.target)] = letter

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return sorted(self._dead.values(), key=lambda d: d.at, reverse=True)[:limit]

    async def remove_dead_letter(self, webhook_id: str, target: str) -> None:
        self._dead.pop(_letter_field(webhook_id, target), None)

    async def prune(self, before: datetime) -> int:
        letters = [key for key, letter in self._dead.items() if letter.at < before]
        for key in letters:
            del self._dead[key]
        states = []
        for url, state in list(self._endpoints.items()):
            if state.updated_at is None:  # saved before states said when: from now
                self._endpoints[url] = _stamped(state)
            elif state.updated_at < before:
                states.append(url)
                del self._endpoints[url]
        return len(letters) + len(states)

    async def schedule(self, retry: ScheduledRetry) -> None:
        self._retries[retry.id] = (retry.due_at, retry)

    async def take_due(self, now: float, *, limit: int, hold_s: float) -> list[ScheduledRetry]:
        due = sorted((at, key) for key, (at, _) in self._retries.items() if at <= now)[:limit]
        taken = [self._retries[key][1] for _, key in due]
        for retry in taken:
            self._retries[retry.id] = (now + hold_s, retry)
        return taken

    async def unschedule(self, retry_id: str) -> None:
        self._retries.pop(retry_id, None)

    async def scheduled(self) -> int:
        return len(self._retries)


class RedisDeliveryLog(DeliveryLog):
    """The delivery log in Redis, shared by every notifier process and read by the API."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        key_prefix: str = "rs",
        max_attempts: int = 100,
        retention_s: float = 30 * 86400.0,
        owns_client: bool = False,
    ) -> None:
        self._redis = client
        self._prefix = f"{key_prefix}:notify:"
        self._max_attempts = max_attempts
        self._retention_s = max(1, int(retention_s))
        self._owns_client = owns_client
        self._take_due = client.register_script(_TAKE_DUE)

    @classmethod
    def from_settings(cls, redis: RedisSettings, notify: NotifySettings) -> RedisDeliveryLog:
        client = async_client(redis)
        return cls(
            client,
            key_prefix=redis.key_prefix,
            max_attempts=notify.log_max_attempts,
            retention_s=notify.log_retention_s,
            owns_client=True,
        )

    def _key(self, *parts: str) -> str:
        return self._prefix + ":".join(parts)

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        """The Redis boundary: its exceptions become ``DeliveryLogUnavailable`` here."""
        try:
            return await op()
        except (RedisError, OSError) as exc:
            raise DeliveryLogUnavailable(f"delivery log: {exc!r}") from None

    async def record(self, attempt: DeliveryAttempt) -> None:
        attempts_key = self._key("attempts", attempt.webhook_id)
        video_key = self._key("video", attempt.video_id)

        async def op() -> list[Any]:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.rpush(attempts_key, attempt.model_dump_json())
                pipe.ltrim(attempts_key, -self._max_attempts, -1)
                pipe.expire(attempts_key, self._retention_s)
                pipe.sadd(video_key, attempt.webhook_id)
                pipe.expire(video_key, self._retention_s)
                return await pipe.execute()

        await self._call(op)

    async def attempts(self, webhook_id: str) -> list[DeliveryAttempt]:
        key = self._key("attempts", webhook_id)
        raw = await self._call(lambda: cast(Awaitable[list[bytes]], self._redis.lrange(key, 0, -1)))
        return [DeliveryAttempt.model_validate_json(item) for item in raw]

    async def attempts_for_video(self, video_id: str) -> list[DeliveryAttempt]:
        key = self._key("video", video_id)
        ids = await self._call(lambda: cast(Awaitable[set[bytes]], self._redis.smembers(key)))
        found: list[DeliveryAttempt] = []
        for webhook_id in sorted(i.decode() for i in ids):
            found.extend(await self.attempts(webhook_id))
        return sorted(found, key=lambda a: a.at)

    async def endpoint(self, url: str) -> EndpointState | None:
        key = self._key("endpoints")
        raw = await self._call(lambda: cast(Awaitable[bytes | None], self._redis.hget(key, url)))
        return EndpointState.model_validate_json(raw) if raw else None

    async def save_endpoint(self, state: EndpointState) -> None:
        key = self._key("endpoints")
        await self._call(lambda: self._redis.hset(key, state.url, state.model_dump_json()))

    async def endpoints(self) -> list[EndpointState]:
        key = self._key("endpoints")
        raw = await self._call(
            lambda: cast(Awaitable[dict[bytes, bytes]], self._redis.hgetall(key))
        )
        return [EndpointState.model_validate_json(v) for v in raw.values()]

    async def add_dead_letter(self, letter: DeadLetter) -> None:
        field = _letter_field(letter.webhook_id, letter.target)

        async def op() -> list[Any]:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._key("dead"), field, letter.model_dump_json())
                pipe.zadd(self._key("dead", "at"), {field: letter.at.timestamp()})
                return await pipe.execute()

        await self._call(op)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        async def op() -> list[bytes | None]:
            fields = cast(
                list[bytes], await self._redis.zrevrange(self._key("dead", "at"), 0, limit - 1)
            )
            if not fields:
                return []
            return cast(list[bytes | None], await self._redis.hmget(self._key("dead"), *fields))

        raw = await self._call(op)
        return [DeadLetter.model_validate_json(item) for item in raw if item]

    async def remove_dead_letter(self, webhook_id: str, target: str) -> None:
        field = _letter_field(webhook_id, target)

        async def op() -> list[Any]:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self._key("dead"), field)
                pipe.zrem(self._key("dead", "at"), field)
                return await pipe.execute()

        await self._call(op)

    async def prune(self, before: datetime) -> int:
        dead, dead_at = self._key("dead"), self._key("dead", "at")
        endpoints = self._key("endpoints")

        async def op() -> int:
            old = cast(
                list[bytes], await self._redis.zrangebyscore(dead_at, "-inf", before.timestamp())
            )
            if old:
                await self._redis.hdel(dead, *old)
                await self._redis.zrem(dead_at, *old)
            gone, unstamped = [], {}
            async for url, raw in self._redis.hscan_iter(endpoints):
                state = EndpointState.model_validate_json(raw)
                if state.updated_at is None:  # saved before states said when: from now
                    unstamped[url] = _stamped(state).model_dump_json()
                elif state.updated_at < before:
                    gone.append(url)
            if gone:
                await self._redis.hdel(endpoints, *gone)
            if unstamped:
                await self._redis.hset(endpoints, mapping=unstamped)
            return len(old) + len(gone)

        return await self._call(op)

    async def schedule(self, retry: ScheduledRetry) -> None:
        async def op() -> list[Any]:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._key("retries"), retry.id, retry.model_dump_json())
                pipe.zadd(self._key("retries", "due"), {retry.id: retry.due_at})
                return await pipe.execute()

        await self._call(op)

    async def take_due(self, now: float, *, limit: int, hold_s: float) -> list[ScheduledRetry]:
        keys = [self._key("retries", "due"), self._key("retries")]
        raw = await self._call(
            lambda: cast(
                Awaitable[list[bytes]],
                self._take_due(keys=keys, args=[now, limit, now + hold_s]),
            )
        )
        return [ScheduledRetry.model_validate_json(item) for item in raw]

    async def unschedule(self, retry_id: str) -> None:
        async def op() -> list[Any]:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self._key("retries"), retry_id)
                pipe.zrem(self._key("retries", "due"), retry_id)
                return await pipe.execute()

        await self._call(op)

    async def scheduled(self) -> int:
        key = self._key("retries", "due")
        return int(await self._call(lambda: self._redis.zcard(key)))

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()
