"""The review queue of the Redis checkpoint store, and the reviewers' verdicts.

``mark_done`` (``redis_mark_done.lua``) puts a done video the review stage flagged into two
sorted sets of its decision, every tenant's and its own, scored by its done time; any later
transition of the record takes it out (``reindex`` in ``redis_lib.lua``), and so does a verdict
(``redis_review_verdict.lua``), which also appends the verdict to the record's ``verdicts`` and
to the append-only audit stream in the same step. The key layout is in ``checkpoint/scripts.py``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, cast

import redis.asyncio as aioredis

from checkpoint.base import (
    QUEUED_DECISIONS,
    REVIEW_CURSOR_PATTERN,
    GivenVerdict,
    ReviewItem,
    ReviewOutcome,
    ReviewQueue,
    Verdict,
)
from checkpoint.errors import NotInReviewQueue, UnknownVideo, VerdictGiven
from checkpoint.redis_wire import boundary
from checkpoint.scripts import EPOCH
from core.errors import PermanentError
from core.review_settings import Decision

# What a page reads of each record in the queue.
_FIELDS = ("status", "tenant", "pipeline_version", "review", "review_summary", "finished_at")


def review_index(prefix: str, decision: Decision, tenant: str | None) -> str:
    """The queue of ``decision``: every tenant's (``tenant`` None) or one tenant's."""
    if tenant is None:
        return f"{prefix}:idx:review:{decision}"
    return f"{prefix}:idx:tenant:{tenant}:review:{decision}"


def outcome_json(review: ReviewOutcome) -> str:
    """What the record keeps of the review (``review_summary``)."""
    data = {"decision": review.decision, "categories": review.categories}
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _outcome(summary: str) -> ReviewOutcome:
    data = json.loads(summary)
    return ReviewOutcome(decision=data["decision"], categories=data.get("categories") or {})


def _decode_cursor(cursor: str) -> tuple[float, int]:
    """(done time in µs, how many of that time were already returned): the scores are whole
    microseconds, so the cursor is plain text."""
    if not re.fullmatch(REVIEW_CURSOR_PATTERN, cursor):
        raise PermanentError(f"invalid review queue cursor {cursor!r}", code="invalid_cursor")
    score, skip = cursor.split(":")
    return float(score), int(skip)


def _at(us: str) -> datetime:
    return EPOCH + timedelta(microseconds=int(us))


def _verdict(raw: Mapping[str, Any]) -> GivenVerdict:
    return GivenVerdict(
        id=str(raw["id"]),
        video_id=str(raw["video_id"]),
        tenant=str(raw["tenant"]),
        verdict=raw["verdict"],
        reviewer=str(raw["reviewer"]),
        note=str(raw["note"]) or None,
        at=_at(str(raw["at"])),
        pipeline_version=str(raw["pipeline_version"]),
        decision=raw["decision"],
    )


class RedisReviewQueue(ReviewQueue):
    """``ReviewQueue`` over the records of a ``RedisCheckpointStore``."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        video_key: Callable[[str], str],
        run_final: Callable[..., Awaitable[Any]],
    ) -> None:
        """``run_final(script name, video id, *args)``: runs one of the store's record scripts
        and answers once what it wrote is on disk (``RedisCheckpointStore._run_final``)."""
        self._redis = redis
        self._prefix = prefix
        self._video_key = video_key
        self._run_final = run_final

    async def page(
        self, *, tenant: str | None, decision: Decision, limit: int, cursor: str | None
    ) -> tuple[list[ReviewItem], str | None]:
        """Oldest done first. The cursor is ``{done time}:{how many of that time were already
        returned}``; a video done again between pages moves to the end, as in any list
        ordered by a changing time. Entries of records past their retention go as they are
        met (and with ``prune_indexes``)."""
        if limit < 1:
            raise PermanentError(f"limit must be at least 1, got {limit}", code="invalid_limit")
        if decision not in QUEUED_DECISIONS:
            raise PermanentError(f"no review queue holds {decision!r}", code="invalid_decision")
        index = review_index(self._prefix, decision, tenant)
        low, skip = _decode_cursor(cursor) if cursor else (float("-inf"), 0)
        async with boundary():
            reply = await self._redis.zrangebyscore(
                index, low, "+inf", start=skip, num=limit + 1, withscores=True
            )
            rows = [(str(member), float(score)) for member, score in cast("list[Any]", reply)]
            async with self._redis.pipeline(transaction=False) as pipe:
                for video_id, _ in rows[:limit]:
                    pipe.hmget(self._video_key(video_id), _FIELDS)
                records: list[list[str | None]] = await pipe.execute()
            expired = [
                video_id
                for (video_id, _), values in zip(rows[:limit], records, strict=True)
                if values[0] is None
            ]
            if expired:  # records past their retention: their queue entries go too
                await self._redis.zrem(index, *expired)
        page = [
            item
            for (video_id, _), values in zip(rows[:limit], records, strict=True)
            if (item := _item(video_id, dict(zip(_FIELDS, values, strict=True)), decision))
            and (tenant is None or item.tenant == tenant)
        ]
        if len(rows) <= limit:
            return page, None
        last = rows[limit - 1][1]
        same = sum(1 for _, score in rows[:limit] if score == last)
        return page, f"{int(last)}:{same + (skip if last == low else 0)}"

    async def give_verdict(
        self,
        video_id: str,
        *,
        tenant: str | None,
        verdict: Verdict,
        reviewer: str,
        note: str | None,
    ) -> GivenVerdict:
        # The id makes the script safe to repeat: a retry whose first reply was lost finds its
        # own verdict and answers as the first would have.
        verdict_id = f"vrd_{uuid.uuid4().hex}"
        args = (tenant or "", verdict, reviewer, note or "", verdict_id)
        reply = await self._run_final("review_verdict", video_id, *args)
        tag = reply[0]
        if tag == "missing":
            raise UnknownVideo(f"no video {video_id!r}")
        if tag == "not_queued":
            status, decision = reply[1], reply[2] or "none"
            raise NotInReviewQueue(
                f"video {video_id!r} is not in the review queue (status {status}, review "
                f"decision {decision}): only a done video the review stage flagged (review or "
                "block) takes a verdict"
            )
        given = _verdict(json.loads(reply[1]))
        if tag == "given":
            raise VerdictGiven(
                f"video {video_id!r} has a verdict for pipeline version "
                f"{given.pipeline_version!r} already ({given.verdict} by {given.reviewer})"
            )
        return given

    async def verdicts(self, video_id: str) -> list[GivenVerdict]:
        async with boundary():
            raw = await self._redis.hget(self._video_key(video_id), "verdicts")
        return [_verdict(entry) for entry in json.loads(str(raw))] if raw else []


def _item(video_id: str, fields: Mapping[str, str | None], decision: Decision) -> ReviewItem | None:
    """The queue entry of a record that is done with ``decision``, else None (a record that
    moved on between the index read and its own)."""
    summary, done_at = fields.get("review_summary"), fields.get("finished_at")
    if fields.get("status") != "done" or fields.get("review") != decision:
        return None
    if not summary or not done_at:
        return None
    return ReviewItem(
        video_id=video_id,
        tenant=str(fields.get("tenant") or "default"),
        pipeline_version=str(fields.get("pipeline_version") or ""),
        done_at=_at(done_at),
        review=_outcome(summary),
    )
