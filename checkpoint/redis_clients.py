"""The Redis clients of the service, made one way: from ``redis.url``, or through Sentinel.

With ``redis.sentinels`` set, a client asks the Sentinels for the current primary of
``redis.sentinel_master`` and asks again after a failover (redis-py's Sentinel pool), so the
checkpoint store, the delivery log and the writer lease follow a promotion without a restart;
the database number and the password still come from ``redis.url`` and ``redis.password``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from core.config import RedisSettings


def async_client(settings: RedisSettings, **options: Any) -> aioredis.Redis:
    """A client of the primary for asyncio; ``options`` as redis-py takes them."""
    client: aioredis.Redis = _client(settings, options, aioredis.Redis, AsyncSentinel)
    return client


def sync_client(settings: RedisSettings, **options: Any) -> redis.Redis:
    """A client of the primary for threads (the writer lease)."""
    client: redis.Redis = _client(settings, options, redis.Redis, Sentinel)
    return client


def _client(
    settings: RedisSettings, options: dict[str, Any], redis_class: Any, sentinel_class: Any
) -> Any:
    kwargs = _connection(settings, options)
    if not settings.sentinels:
        return redis_class.from_url(settings.url, **kwargs)
    sentinel = sentinel_class(_addresses(settings), sentinel_kwargs=_sentinel_kwargs(settings))
    return sentinel.master_for(settings.sentinel_master, db=_db(settings.url), **kwargs)


def retrying() -> Retry:
    """For clients whose every command is safe to repeat (the scripts are): a command cut by a
    dropped connection or a failover is sent again twice, briefly."""
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), 2)


def _connection(settings: RedisSettings, options: dict[str, Any]) -> dict[str, Any]:
    return {
        "password": settings.password.get_secret_value() if settings.password else None,
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": settings.socket_timeout_s,
        **options,
    }


def _sentinel_kwargs(settings: RedisSettings) -> dict[str, Any]:
    password = settings.sentinel_password
    return {
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": settings.socket_timeout_s,
        **({"password": password.get_secret_value()} if password else {}),
    }


def _addresses(settings: RedisSettings) -> list[tuple[str, int]]:
    found = []
    for address in settings.sentinels:
        host, _, port = address.rpartition(":")
        found.append((host.strip("[]"), int(port)))
    return found


def _db(url: str) -> int:
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else 0
