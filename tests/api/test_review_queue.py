"""The review queue routes (``/v1/review``) over a real RedisCheckpointStore: videos marked
done with a review decision as the runtime marks them, reviewers' verdicts through the API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from api.app import create_app
from checkpoint.base import ReviewOutcome
from checkpoint.redis_store import RedisCheckpointStore
from core.records import VideoRef
from core.review_settings import Decision

V1, V2 = "pv-1", "pv-2"
TOKENS = {"token-a": "acme", "token-b": "globex"}
A = {"authorization": "Bearer token-a"}
B = {"authorization": "Bearer token-b"}
APPROVE = {"verdict": "approve", "reviewer": "ann"}


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[RedisCheckpointStore]:
    opened = RedisCheckpointStore.from_url(redis_url, key_prefix=f"review-{unique}")
    yield opened
    await opened.close()


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://api")


def outcome(decision: Decision) -> ReviewOutcome:
    score = {"pass": 0.1, "review": 0.6, "block": 0.9985}[decision]
    categories: dict[str, dict[str, Any]] = {
        "contact": {"score": score, "decision": decision, "findings": 2},
        "qr": {"score": 0.0, "decision": "pass", "findings": 0},
    }
    return ReviewOutcome(decision, categories)


async def done(
    store: RedisCheckpointStore,
    video_id: str,
    decision: Decision | None,
    *,
    tenant: str = "acme",
    version: str = V1,
) -> None:
    """A video done as the runtime marks it: its review decision with the transition."""
    claim = await store.claim(VideoRef(video_id, f"file:///v/{video_id}.mp4", tenant), version)
    review = None if decision is None else outcome(decision)
    await store.mark_done(video_id, claim.epoch, frames=3, timings={}, outbox=None, review=review)


def ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["video_id"] for item in response.json()["items"]]


async def audit(raw: aioredis.Redis, store: RedisCheckpointStore) -> list[dict[str, str]]:
    entries: Any = await raw.xrange(f"{store._prefix}:review:audit")
    return [dict(fields) for _, fields in entries]


# -- the queue ------------------------------------------------------------------------------


async def test_the_queue_lists_the_flagged_oldest_first_with_their_scores(
    store: RedisCheckpointStore,
) -> None:
    await done(store, "old", "review")
    await done(store, "blocked", "block")
    await done(store, "passed", "pass")
    await done(store, "unreviewed", None)
    await done(store, "new", "review")
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        review = await client.get("/v1/review", params={"decision": "review"}, headers=A)
        block = await client.get("/v1/review", params={"decision": "block"}, headers=A)
    assert ids(review) == ["old", "new"]
    assert ids(block) == ["blocked"]
    item = review.json()["items"][0]
    record = await store.get("old")
    assert record is not None
    assert record.finished_at is not None
    assert item == {
        "video_id": "old",
        "tenant": "acme",
        "decision": "review",
        "done_at": item["done_at"],
        "pipeline_version": V1,
        "categories": {
            "contact": {"score": 0.6, "decision": "review", "findings": 2},
            "qr": {"score": 0.0, "decision": "pass", "findings": 0},
        },
        "result": "/v1/videos/old/result",
    }
    assert item["done_at"].startswith(record.finished_at.isoformat()[:19])
    assert "evidence" not in review.text  # the evidence is in the result


async def test_the_queue_pages_through_every_video_once(store: RedisCheckpointStore) -> None:
    expected = [f"v{i}" for i in range(7)]
    for video_id in expected:
        await done(store, video_id, "block")
    seen: list[str] = []
    async with client_for(create_app(store, tokens={})) as client:
        cursor: str | None = None
        while True:
            params: dict[str, str | int] = {"decision": "block", "limit": 3}
            params |= {"cursor": cursor} if cursor else {}
            response = await client.get("/v1/review", params=params)
            page = response.json()
            assert len(page["items"]) <= 3
            seen += ids(response)
            cursor = page["next_cursor"]
            if cursor is None:
                break
        bad_cursor = await client.get("/v1/review", params={"decision": "block", "cursor": "x"})
    assert seen == expected
    assert bad_cursor.status_code == 422
    assert bad_cursor.json()["error"]["code"] == "invalid_request"


async def test_bad_queue_parameters_are_422(store: RedisCheckpointStore) -> None:
    async with client_for(create_app(store, tokens={})) as client:
        answers = [
            await client.get("/v1/review"),
            await client.get("/v1/review", params={"decision": "pass"}),
            await client.get("/v1/review", params={"decision": "review", "limit": 0}),
        ]
    for response in answers:
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_request"


async def test_without_tokens_every_tenant_is_listed(store: RedisCheckpointStore) -> None:
    await done(store, "a-1", "review", tenant="acme")
    await done(store, "b-1", "review", tenant="globex")
    async with client_for(create_app(store, tokens={})) as client:
        every = await client.get("/v1/review", params={"decision": "review"})
        one = await client.get("/v1/review", params={"decision": "review", "tenant": "globex"})
    assert ids(every) == ["a-1", "b-1"]
    assert ids(one) == ["b-1"]


# -- tenants --------------------------------------------------------------------------------


async def test_a_tenant_sees_and_judges_only_its_own(store: RedisCheckpointStore) -> None:
    await done(store, "a-1", "review", tenant="acme")
    await done(store, "a-2", "block", tenant="acme")
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        b_review = await client.get("/v1/review", params={"decision": "review"}, headers=B)
        b_block = await client.get("/v1/review", params={"decision": "block"}, headers=B)
        b_asks_a = await client.get(
            "/v1/review", params={"decision": "review", "tenant": "acme"}, headers=B
        )
        b_judges = await client.post("/v1/review/a-1", json=APPROVE, headers=B)
        b_history = await client.get("/v1/review/a-1/history", headers=B)
        nobody = await client.get("/v1/review", params={"decision": "review"})
        unknown = await client.post("/v1/review/nothing", json=APPROVE, headers=A)
        a_review = await client.get("/v1/review", params={"decision": "review"}, headers=A)
    assert ids(b_review) == ids(b_block) == []
    assert b_asks_a.status_code == 403
    for response in (b_judges, b_history, unknown):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert nobody.status_code == 401
    assert ids(a_review) == ["a-1"]  # B's attempt changed nothing


# -- verdicts -------------------------------------------------------------------------------


async def test_a_verdict_is_recorded_audited_and_takes_the_video_out(
    store: RedisCheckpointStore, raw: aioredis.Redis
) -> None:
    await done(store, "a-1", "block")
    await done(store, "a-2", "block")
    body = {"verdict": "remove", "reviewer": " 审核员 ann ", "note": "电话号码 138 1234 5678"}
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        given = await client.post("/v1/review/a-1", json=body, headers=A)
        queue = await client.get("/v1/review", params={"decision": "block"}, headers=A)
        history = await client.get("/v1/review/a-1/history", headers=A)
        untouched = await client.get("/v1/review/a-2/history", headers=A)
        again = await client.post("/v1/review/a-1", json=APPROVE, headers=A)
    assert given.status_code == 200, given.text
    verdict = given.json()
    assert verdict["id"].startswith("vrd_")
    assert {key: verdict[key] for key in ("video_id", "tenant", "verdict", "decision")} == {
        "video_id": "a-1",
        "tenant": "acme",
        "verdict": "remove",
        "decision": "block",
    }
    assert (verdict["reviewer"], verdict["note"]) == ("审核员 ann", "电话号码 138 1234 5678")
    assert verdict["pipeline_version"] == V1
    assert ids(queue) == ["a-2"]
    assert history.json() == {"video_id": "a-1", "verdicts": [verdict]}
    assert untouched.json() == {"video_id": "a-2", "verdicts": []}
    (entry,) = await audit(raw, store)
    assert {key: entry[key] for key in ("id", "video_id", "tenant", "verdict", "reviewer")} == {
        "id": verdict["id"],
        "video_id": "a-1",
        "tenant": "acme",
        "verdict": "remove",
        "reviewer": "审核员 ann",
    }
    assert (entry["decision"], entry["note"], entry["pipeline_version"]) == (
        "block",
        "电话号码 138 1234 5678",
        V1,
    )
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "verdict_given"
    assert len(await audit(raw, store)) == 1


async def test_a_video_not_in_the_queue_takes_no_verdict(
    store: RedisCheckpointStore, raw: aioredis.Redis
) -> None:
    await done(store, "passed", "pass")
    await done(store, "unreviewed", None)
    await store.claim(VideoRef("running", "file:///v/running.mp4", "acme"), V1)
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        answers = [
            await client.post(f"/v1/review/{video_id}", json=APPROVE, headers=A)
            for video_id in ("passed", "unreviewed", "running")
        ]
    for response in answers:
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "not_in_review_queue"
    assert await audit(raw, store) == []


async def test_malformed_verdicts_are_422(store: RedisCheckpointStore) -> None:
    await done(store, "a-1", "review")
    bodies: list[Any] = [
        {},
        {"verdict": "approve"},
        {"reviewer": "ann"},
        {"verdict": "maybe", "reviewer": "ann"},
        {"verdict": "approve", "reviewer": ""},
        {"verdict": "approve", "reviewer": "   "},
        {"verdict": "approve", "reviewer": "x" * 101},
        {"verdict": "approve", "reviewer": "ann", "note": "x" * 1001},
        {"verdict": "approve", "reviewer": "ann", "extra": 1},
        {"verdict": "approve", "reviewer": 7},
        ["approve", "ann"],
    ]
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        answers = [await client.post("/v1/review/a-1", json=body, headers=A) for body in bodies]
        not_json = await client.post(
            "/v1/review/a-1",
            content=b"verdict=approve",
            headers=A | {"content-type": "application/json"},
        )
        queue = await client.get("/v1/review", params={"decision": "review"}, headers=A)
    for response in [*answers, not_json]:
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "invalid_request"
    assert ids(queue) == ["a-1"]


async def test_a_video_done_again_comes_back_by_its_new_decision(
    store: RedisCheckpointStore,
) -> None:
    await done(store, "a-1", "review")
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        first = await client.post("/v1/review/a-1", json=APPROVE, headers=A)
        await done(store, "a-1", "block", version=V2)
        review = await client.get("/v1/review", params={"decision": "review"}, headers=A)
        block = await client.get("/v1/review", params={"decision": "block"}, headers=A)
        second = await client.post(
            "/v1/review/a-1", json={"verdict": "remove", "reviewer": "bob"}, headers=A
        )
        history = await client.get("/v1/review/a-1/history", headers=A)
    assert first.status_code == second.status_code == 200
    assert (ids(review), ids(block)) == ([], ["a-1"])
    assert [
        (v["pipeline_version"], v["decision"], v["verdict"]) for v in history.json()["verdicts"]
    ] == [(V1, "review", "approve"), (V2, "block", "remove")]


async def test_a_deleted_video_leaves_the_queue(store: RedisCheckpointStore) -> None:
    await done(store, "a-1", "review")
    await done(store, "a-2", "review")
    assert await store.mark_deleted("a-1", tenant="acme", asked_ms=1, outbox=None)
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        queue = await client.get("/v1/review", params={"decision": "review"}, headers=A)
        verdict = await client.post("/v1/review/a-1", json=APPROVE, headers=A)
    assert ids(queue) == ["a-2"]
    assert verdict.status_code == 409
    assert verdict.json()["error"]["code"] == "not_in_review_queue"


async def test_openapi_describes_the_review_routes(store: RedisCheckpointStore) -> None:
    async with client_for(create_app(store, tokens={})) as client:
        schema = (await client.get("/openapi.json")).json()
    post = schema["paths"]["/v1/review/{video_id}"]["post"]
    assert post["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ReviewVerdict"
    }
    assert "verdict_given" in post["responses"]["409"]["description"]
    assert "/v1/review/{video_id}/history" in schema["paths"]
    components = schema["components"]["schemas"]
    for name in ("ReviewQueuePage", "ReviewQueueItem", "VerdictRequest", "ReviewHistory"):
        assert name in components
    assert components["VerdictRequest"]["properties"]["reviewer"]["description"]
