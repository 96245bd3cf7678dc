"""The video lists of the Redis checkpoint store: a page of one index, newest first.

Every list is a sorted set of video ids scored by their record's updated time (the key layout
is in ``checkpoint/scripts.py``). A page reads the records behind its ids in one round trip;
the ids of records past their retention leave the index as they are met.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import redis.asyncio as aioredis

from checkpoint.base import VideoState, VideoStatus
from checkpoint.redis_wire import boundary, decode_cursor, encode_cursor
from checkpoint.scripts import record_from_fields
from core.errors import PermanentError


async def list_page(
    redis: aioredis.Redis,
    prefix: str,
    video_key: Callable[[str], str],
    *,
    status: VideoState | None,
    tenant: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[VideoStatus], str | None]:
    """Newest first by updated time. The cursor is (score, how many of that score were
    already returned); a video updated between pages moves to the front and may be missed
    or seen twice by a paging reader, as with any list ordered by a changing time."""
    if limit < 1:
        raise PermanentError(f"limit must be at least 1, got {limit}", code="invalid_limit")
    parts = [f"tenant:{tenant}"] if tenant is not None else []
    parts += [f"status:{status.value}"] if status is not None else []
    index = f"{prefix}:idx:" + (":".join(parts) or "all")
    top, skip = decode_cursor(cursor) if cursor else (float("inf"), 0)
    async with boundary():
        reply = await redis.zrevrangebyscore(
            index, top, "-inf", start=skip, num=limit + 1, withscores=True
        )
        rows = [(str(member), float(score)) for member, score in cast("list[Any]", reply)]
        async with redis.pipeline(transaction=False) as pipe:
            for video_id, _ in rows[:limit]:
                pipe.hgetall(video_key(video_id))
            records: list[dict[str, str]] = await pipe.execute()
        expired = [
            video_id
            for (video_id, _), fields in zip(rows[:limit], records, strict=True)
            if not fields
        ]
        if expired:  # records past their retention: their index entries go too
            await redis.zrem(index, *expired)
    page = [
        record_from_fields(fields)
        for fields in records
        if fields
        and (status is None or fields.get("status") == status.value)
        and (tenant is None or fields.get("tenant") == tenant)
    ]
    if len(rows) <= limit:
        return page, None
    last = rows[limit - 1][1]
    same = sum(1 for _, score in rows[:limit] if score == last)
    return page, encode_cursor(last, same + (skip if last == top else 0))
