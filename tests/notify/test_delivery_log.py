"""The delivery log: the in-memory and the Redis implementation behave the same."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis

from devkit.services import free_port
from notify.base import DeadLetter, DeliveryAttempt, DeliveryLog, EndpointState, Outcome
from notify.delivery_log import MemoryDeliveryLog, RedisDeliveryLog
from notify.errors import DeliveryLogUnavailable
from tests.notify.support import make_event

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def attempt(
    n: int, *, webhook_id: str = "msg_a", target: str = "http://t/1", **kw: object
) -> DeliveryAttempt:
    return DeliveryAttempt(
        webhook_id=webhook_id,
        video_id=str(kw.pop("video_id", "v1")),
        tenant="acme",
        type="video.done",
        target=target,
        attempt=n,
        outcome=kw.pop("outcome", Outcome.RETRY),  # type: ignore[arg-type]
        status_code=500,
        next_retry_at=T0 + timedelta(seconds=n),
        at=T0 + timedelta(seconds=n),
    )


@pytest.fixture(params=["memory", "redis"])
async def delivery_log(request: pytest.FixtureRequest, unique: str) -> AsyncIterator[DeliveryLog]:
    if request.param == "memory":
        yield MemoryDeliveryLog(max_attempts=5)
        return
    redis_url = request.getfixturevalue("redis_url")
    client = aioredis.Redis.from_url(redis_url)
    log = RedisDeliveryLog(client, key_prefix=f"t-{unique}", max_attempts=5, retention_s=600)
    yield log
    await log.close()
    await client.aclose()


async def test_attempts_in_order_trimmed_and_by_video(delivery_log: DeliveryLog) -> None:
    for n in range(1, 8):
        await delivery_log.record(attempt(n))
    await delivery_log.record(attempt(1, webhook_id="msg_b", outcome=Outcome.DELIVERED))
    await delivery_log.record(attempt(1, webhook_id="msg_c", video_id="v2"))
    kept = await delivery_log.attempts("msg_a")
    assert [a.attempt for a in kept] == [3, 4, 5, 6, 7]
    assert kept[-1] == attempt(7)
    by_video = await delivery_log.attempts_for_video("v1")
    assert [(a.webhook_id, a.attempt) for a in by_video] == [
        ("msg_b", 1),
        ("msg_a", 3),
        ("msg_a", 4),
        ("msg_a", 5),
        ("msg_a", 6),
        ("msg_a", 7),
    ]
    assert await delivery_log.attempts("nothing") == []


async def test_last_attempt_per_target(delivery_log: DeliveryLog) -> None:
    await delivery_log.record(attempt(1, target="http://t/1"))
    await delivery_log.record(attempt(1, target="http://t/2", outcome=Outcome.DELIVERED))
    await delivery_log.record(attempt(2, target="http://t/1"))
    last = await delivery_log.last_attempt("msg_a", "http://t/1")
    assert last is not None
    assert last.attempt == 2
    last2 = await delivery_log.last_attempt("msg_a", "http://t/2")
    assert last2 is not None
    assert last2.outcome is Outcome.DELIVERED
    assert await delivery_log.last_attempt("msg_a", "http://t/3") is None


async def test_endpoint_state_round_trip(delivery_log: DeliveryLog) -> None:
    assert await delivery_log.endpoint("http://e/1") is None
    state = EndpointState(
        url="http://e/1", consecutive_failures=3, failing_since=T0, last_status_code=503
    )
    await delivery_log.save_endpoint(state)
    await delivery_log.save_endpoint(EndpointState(url="http://e/2", disabled=True))
    assert await delivery_log.endpoint("http://e/1") == state
    assert sorted(e.url for e in await delivery_log.endpoints()) == ["http://e/1", "http://e/2"]


async def test_dead_letters_newest_first_and_removable(delivery_log: DeliveryLog) -> None:
    for i in range(3):
        await delivery_log.add_dead_letter(
            DeadLetter(
                webhook_id=f"msg_{i}",
                target="http://t/1",
                event=make_event(f"v{i}"),
                outcome=Outcome.DEAD_LETTERED,
                code="retries_exhausted",
                attempts=4,
                at=T0 + timedelta(minutes=i),
            )
        )
    letters = await delivery_log.dead_letters()
    assert [d.webhook_id for d in letters] == ["msg_2", "msg_1", "msg_0"]
    assert letters[0].event == make_event("v2")
    assert [d.webhook_id for d in await delivery_log.dead_letters(limit=1)] == ["msg_2"]
    await delivery_log.remove_dead_letter("msg_1", "http://t/1")
    assert [d.webhook_id for d in await delivery_log.dead_letters()] == ["msg_2", "msg_0"]


async def test_redis_down_is_a_retryable_error() -> None:
    client = aioredis.Redis.from_url(
        f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5
    )
    log = RedisDeliveryLog(client, key_prefix="x")
    with pytest.raises(DeliveryLogUnavailable):
        await log.record(attempt(1))
    with pytest.raises(DeliveryLogUnavailable):
        await log.attempts("msg_a")
    await client.aclose()
