"""The review queue of the Redis checkpoint store against a real redis-server: what
``mark_done`` puts in it, what takes a video out, and the verdict script's one atomic step."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis

from checkpoint.base import ReviewOutcome
from checkpoint.errors import NotInReviewQueue, StaleEpoch, UnknownVideo, VerdictGiven
from checkpoint.redis_store import RedisCheckpointStore
from core.records import VideoRef
from core.review_settings import Decision

V1, V2 = "pv-1", "pv-2"


@dataclass
class Ctx:
    store: RedisCheckpointStore
    raw: aioredis.Redis  # for looking at the keys the store wrote
    prefix: str

    def key(self, suffix: str) -> str:
        return f"{self.prefix}:{suffix}"


@pytest.fixture
async def cp(redis_url: str, unique: str) -> AsyncIterator[Ctx]:
    prefix = f"rq-{unique}"
    store = RedisCheckpointStore.from_url(redis_url, key_prefix=prefix)
    raw = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield Ctx(store, raw, prefix)
    await store.close()
    await raw.aclose()


def ref(video_id: str, tenant: str = "acme") -> VideoRef:
    return VideoRef(video_id=video_id, uri=f"s3://uploads/{video_id}.mp4", tenant=tenant)


def outcome(decision: Decision) -> ReviewOutcome:
    score = {"pass": 0.0, "review": 0.6, "block": 0.99}[decision]
    return ReviewOutcome(
        decision,
        {"contact": {"score": score, "decision": decision, "findings": 1 if score else 0}},
    )


async def done(
    cp: Ctx,
    video_id: str,
    decision: Decision | None,
    *,
    version: str = V1,
    tenant: str = "acme",
) -> None:
    claim = await cp.store.claim(ref(video_id, tenant), version)
    review = None if decision is None else outcome(decision)
    await cp.store.mark_done(
        video_id, claim.epoch, frames=1, timings={}, outbox=None, review=review
    )


async def queue(cp: Ctx, decision: Decision, tenant: str | None = "acme") -> list[str]:
    items, _ = await cp.store.reviews.page(tenant=tenant, decision=decision, limit=100, cursor=None)
    return [item.video_id for item in items]


async def audit(cp: Ctx) -> list[dict[str, str]]:
    entries: Any = await cp.raw.xrange(cp.key("review:audit"))
    return [dict(fields) for _, fields in entries]


async def test_done_records_the_decision_and_queues_the_flagged_oldest_first(cp: Ctx) -> None:
    made: list[tuple[str, Decision | None]] = [
        ("b1", "block"),
        ("r1", "review"),
        ("p1", "pass"),
        ("n1", None),
    ]
    for video_id, decision in made:
        await done(cp, video_id, decision)
    await done(cp, "r2", "review")
    await done(cp, "other", "review", tenant="globex")

    assert await queue(cp, "review") == ["r1", "r2"]
    assert await queue(cp, "block") == ["b1"]
    assert await queue(cp, "review", tenant=None) == ["r1", "r2", "other"]
    assert await queue(cp, "review", tenant="globex") == ["other"]
    assert await cp.raw.hget(cp.key("video:p1"), "review") == "pass"
    assert not await cp.raw.hexists(cp.key("video:n1"), "review")

    (first, _), _ = await cp.store.reviews.page(
        tenant="acme", decision="review", limit=2, cursor=None
    )
    record = await cp.store.get("r1")
    assert record is not None
    assert (first.tenant, first.pipeline_version, first.done_at) == (
        "acme",
        V1,
        record.finished_at,
    )
    assert first.review == outcome("review")


async def test_pages_go_through_the_queue_once_in_order(cp: Ctx) -> None:
    ids = [f"v{i}" for i in range(7)]
    for video_id in ids:
        await done(cp, video_id, "review")
    seen: list[str] = []
    cursor: str | None = None
    while True:
        items, cursor = await cp.store.reviews.page(
            tenant="acme", decision="review", limit=3, cursor=cursor
        )
        assert len(items) <= 3
        seen += [item.video_id for item in items]
        if cursor is None:
            break
    assert seen == ids


async def test_a_verdict_is_recorded_audited_and_takes_the_video_out(cp: Ctx) -> None:
    await done(cp, "v1", "block")
    given = await cp.store.reviews.give_verdict(
        "v1", tenant="acme", verdict="remove", reviewer="ann", note="phone number on screen"
    )
    assert (given.video_id, given.tenant, given.verdict, given.reviewer, given.note) == (
        "v1",
        "acme",
        "remove",
        "ann",
        "phone number on screen",
    )
    assert (given.decision, given.pipeline_version) == ("block", V1)
    assert await queue(cp, "block") == []
    assert await queue(cp, "block", tenant=None) == []
    assert await cp.store.reviews.verdicts("v1") == [given]
    (entry,) = await audit(cp)
    assert entry == {
        "id": given.id,
        "video_id": "v1",
        "tenant": "acme",
        "decision": "block",
        "verdict": "remove",
        "reviewer": "ann",
        "note": "phone number on screen",
        "at": entry["at"],
        "pipeline_version": V1,
    }
    assert int(entry["at"]) == round(given.at.timestamp() * 1_000_000)

    with pytest.raises(VerdictGiven):
        await cp.store.reviews.give_verdict(
            "v1", tenant="acme", verdict="approve", reviewer="bob", note=None
        )
    assert len(await audit(cp)) == 1
    assert await cp.store.reviews.verdicts("v1") == [given]


async def test_only_a_queued_video_of_the_tenant_takes_a_verdict(cp: Ctx) -> None:
    await done(cp, "passed", "pass")
    await done(cp, "unreviewed", None)
    await cp.store.claim(ref("running"), V1)
    await done(cp, "flagged", "review")
    for video_id in ("passed", "unreviewed", "running"):
        with pytest.raises(NotInReviewQueue):
            await cp.store.reviews.give_verdict(
                video_id, tenant="acme", verdict="approve", reviewer="ann", note=None
            )
    for video_id, tenant in (("nothing", "acme"), ("flagged", "globex")):
        with pytest.raises(UnknownVideo):
            await cp.store.reviews.give_verdict(
                video_id, tenant=tenant, verdict="approve", reviewer="ann", note=None
            )
    assert await audit(cp) == []
    assert await queue(cp, "review") == ["flagged"]


async def test_verdicts_given_at_once_record_one(cp: Ctx) -> None:
    await done(cp, "v1", "review")
    outcomes = await asyncio.gather(
        *(
            cp.store.reviews.give_verdict(
                "v1", tenant=None, verdict="approve", reviewer=f"r{i}", note=None
            )
            for i in range(8)
        ),
        return_exceptions=True,
    )
    given = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(given) == 1
    assert len(refused) == 7
    assert all(isinstance(error, VerdictGiven) for error in refused)
    assert len(await audit(cp)) == 1
    assert await cp.store.reviews.verdicts("v1") == given


async def test_a_repeated_verdict_script_writes_once(cp: Ctx) -> None:
    """A retry whose first reply was lost sends the same verdict id: the same answer, nothing
    written twice."""
    await done(cp, "v1", "review")
    args = ("acme", "approve", "ann", "", "vrd_fixed")
    first = await cp.store._run_final("review_verdict", "v1", *args)
    again = await cp.store._run_final("review_verdict", "v1", *args)
    assert first[0] == again[0] == "ok"
    assert json.loads(first[1]) == json.loads(again[1])
    assert len(await audit(cp)) == 1


async def test_done_again_moves_the_video_by_its_new_decision(cp: Ctx) -> None:
    await done(cp, "v1", "review")
    await cp.store.reviews.give_verdict(
        "v1", tenant="acme", verdict="approve", reviewer="ann", note=None
    )
    # Processed again for another version: out of the queue while it runs...
    claim = await cp.store.claim(ref("v1"), V2)
    assert await queue(cp, "review") == []
    assert not await cp.raw.hexists(cp.key("video:v1"), "review")
    # ...and back by its new decision, its earlier verdict kept.
    await cp.store.mark_done(
        "v1", claim.epoch, frames=1, timings={}, outbox=None, review=outcome("block")
    )
    assert (await queue(cp, "review"), await queue(cp, "block")) == ([], ["v1"])
    second = await cp.store.reviews.give_verdict(
        "v1", tenant="acme", verdict="remove", reviewer="bob", note=None
    )
    verdicts = await cp.store.reviews.verdicts("v1")
    assert [(v.pipeline_version, v.decision, v.verdict) for v in verdicts] == [
        (V1, "review", "approve"),
        (V2, "block", "remove"),
    ]
    assert verdicts[1] == second

    assert await queue(cp, "block") == []

    # Done again with a pass: out of the queue.
    await done(cp, "v2", "block")
    assert await queue(cp, "block") == ["v2"]
    claim = await cp.store.claim(ref("v2"), V2)
    await cp.store.mark_done(
        "v2", claim.epoch, frames=1, timings={}, outbox=None, review=outcome("pass")
    )
    assert await queue(cp, "block", tenant=None) == []
    assert await cp.raw.hget(cp.key("video:v2"), "review") == "pass"


async def test_a_version_with_a_verdict_does_not_come_back(cp: Ctx) -> None:
    await done(cp, "v1", "review")
    await cp.store.reviews.give_verdict(
        "v1", tenant="acme", verdict="approve", reviewer="ann", note=None
    )
    await cp.store.mark_queued(ref("v1"), V2)
    await done(cp, "v1", "review", version=V1)  # done for V1 once more
    assert await queue(cp, "review") == []


async def test_a_deleted_video_leaves_the_queue(cp: Ctx) -> None:
    await done(cp, "v1", "review")
    await done(cp, "v2", "block")
    for video_id in ("v1", "v2"):
        assert await cp.store.mark_deleted(video_id, tenant="acme", asked_ms=1, outbox=None)
    assert await queue(cp, "review") == []
    assert await queue(cp, "block", tenant=None) == []
    with pytest.raises(NotInReviewQueue):
        await cp.store.reviews.give_verdict(
            "v1", tenant="acme", verdict="remove", reviewer="ann", note=None
        )


async def test_a_refused_done_leaves_the_queue_as_it_was(cp: Ctx) -> None:
    claim = await cp.store.claim(ref("v1"), V1)
    with pytest.raises(StaleEpoch):
        await cp.store.mark_done(
            "v1", claim.epoch + 1, frames=1, timings={}, outbox=None, review=outcome("block")
        )
    assert await queue(cp, "block") == []
    assert not await cp.raw.hexists(cp.key("video:v1"), "review")


async def test_an_expired_record_leaves_the_queue(redis_url: str, unique: str) -> None:
    store = RedisCheckpointStore.from_url(
        redis_url, key_prefix=f"rq-exp-{unique}", finished_retention_s=0.05
    )
    try:
        claim = await store.claim(ref("v1"), V1)
        await store.mark_done(
            "v1", claim.epoch, frames=1, timings={}, outbox=None, review=outcome("review")
        )
        await asyncio.sleep(0.2)
        assert await store.reviews.page(tenant="acme", decision="review", limit=5, cursor=None) == (
            [],
            None,
        )
        assert await store._redis.zcard(f"rq-exp-{unique}:idx:tenant:acme:review:review") == 0
    finally:
        await store.close()
