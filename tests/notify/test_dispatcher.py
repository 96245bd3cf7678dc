"""The dispatcher end to end: Redis checkpoint store (outbox), real HTTP receiver, Tansu."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis
from standardwebhooks.webhooks import Webhook

from checkpoint.base import OutboxEvent
from checkpoint.redis_store import RedisCheckpointStore
from core.config import KafkaSettings, NotifySettings, WebhookSubscription
from core.records import VideoRef
from devkit.blackhole import Blackhole
from devkit.receiver import Reply, WebhookReceiver
from devkit.services import free_port
from devkit.workload import read_records
from notify.base import DeliveryLog, Outcome, StatusPublisher
from notify.delivery_log import MemoryDeliveryLog, RedisDeliveryLog
from notify.dispatcher import NotificationDispatcher
from notify.outbox import targets_for
from notify.status_topic import StatusTopicPublisher
from notify.webhooks import WebhookSender
from tests.notify.support import SECRET, make_event, notify_settings
from tests.notify.test_status_topic import create_topic, new_status_topic

PV = "pv1"


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout_s: float = 20) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():  # noqa: ASYNC110 - the state lives in Redis and the receiver
            await asyncio.sleep(0.05)


@dataclass
class Ctx:
    store: RedisCheckpointStore
    raw: aioredis.Redis
    prefix: str
    receiver: WebhookReceiver
    redis_url: str

    async def outbox_len(self) -> int:
        return int(await self.raw.xlen(f"{self.prefix}:outbox"))

    async def all_acked(self) -> bool:
        return await self.outbox_len() == 0

    def settled(self, dispatcher: NotificationDispatcher) -> Callable[[], Awaitable[bool]]:
        """Every entry acked and nothing left in the dispatcher's retry schedule."""

        async def check() -> bool:
            return await self.all_acked() and await dispatcher.settled()

        return check

    async def finish(self, video_id: str, *, callback: str | None = None, **kw: Any) -> OutboxEvent:
        """Claim and mark the video done (or failed), which appends its outbox entry."""
        kind = kw.pop("type", "video.done")
        ref = VideoRef(
            video_id=video_id,
            uri=f"s3://in/{video_id}.mp4",
            tenant=kw.get("tenant", "acme"),
            callback_url=callback,
        )
        event = make_event(
            video_id,
            type=kind,
            callback_url=callback,
            pipeline_version=PV,
            timestamp=datetime.now(UTC),
            **kw,
        )
        claim = await self.store.claim(ref, PV)
        if kind == "video.done":
            await self.store.mark_done(video_id, claim.epoch, frames=3, timings={}, outbox=event)
        else:
            await self.store.mark_failed(
                ref,
                claim.epoch,
                code="invalid_video",
                message="broken",
                pipeline_version=PV,
                stage="decode",
                outbox=event,
            )
        return event

    def redis_log(self) -> RedisDeliveryLog:
        return RedisDeliveryLog(aioredis.Redis.from_url(self.redis_url), key_prefix=self.prefix)


@pytest.fixture
async def ctx(redis_url: str, unique: str) -> AsyncIterator[Ctx]:
    prefix = f"n-{unique}"
    store = RedisCheckpointStore.from_url(redis_url, key_prefix=prefix)
    raw = aioredis.Redis.from_url(redis_url)
    receiver = await WebhookReceiver().start()
    yield Ctx(store, raw, prefix, receiver, redis_url)
    await receiver.stop()
    await store.close()
    await raw.aclose()


def make_dispatcher(
    ctx: Ctx,
    settings: NotifySettings,
    *,
    name: str = "n1",
    publisher: StatusPublisher | None = None,
    delivery_log: DeliveryLog | None = None,
) -> NotificationDispatcher:
    return NotificationDispatcher(
        ctx.store,
        WebhookSender(settings),
        publisher,
        settings,
        name,
        delivery_log=delivery_log or MemoryDeliveryLog(),
    )


@contextlib.asynccontextmanager
async def running(dispatcher: NotificationDispatcher) -> AsyncIterator[NotificationDispatcher]:
    task = asyncio.create_task(dispatcher.run())
    try:
        yield dispatcher
    finally:
        await dispatcher.stop()
        await asyncio.wait_for(task, 10)


async def attempts_of(d: NotificationDispatcher, event: OutboxEvent) -> list[Any]:
    return await d.delivery_log.attempts(event.webhook_id)


async def test_mark_done_delivers_a_signed_webhook_and_acks(
    ctx: Ctx, kafka_bootstrap: str, unique: str
) -> None:
    topic, publisher = await new_status_topic(kafka_bootstrap, unique)
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    assert await ctx.outbox_len() == 1
    async with running(make_dispatcher(ctx, notify_settings(), publisher=publisher)) as d:
        await ctx.receiver.wait_for(1)
        await eventually(ctx.settled(d))
        assert d.acked == 1
        [attempt] = await attempts_of(d, event)
    [got] = ctx.receiver.requests
    assert got.path == "/cb"
    payload = Webhook(SECRET).verify(got.body, got.headers)
    assert got.webhook_id == event.webhook_id
    assert payload["type"] == "video.done"
    assert payload["data"]["video_id"] == "v1"
    assert payload["data"]["pipeline_version"] == PV
    assert (attempt.outcome, attempt.attempt, attempt.status_code) == (Outcome.DELIVERED, 1, 200)
    [record] = await read_records(kafka_bootstrap, topic, 1)
    assert dict(record.headers)["webhook-id"].decode() == event.webhook_id
    assert record.key == b"v1"
    assert json.loads(record.value) == payload


async def test_an_event_the_status_topic_refuses_is_dead_lettered_not_retried(
    ctx: Ctx, kafka_bootstrap: str, unique: str
) -> None:
    topic, publisher = await new_status_topic(kafka_bootstrap, unique)
    event = await ctx.finish(
        "v-big", callback=ctx.receiver.url("/cb"), data={"blob": "x" * (2 * 1024 * 1024)}
    )
    async with running(make_dispatcher(ctx, notify_settings(), publisher=publisher)) as d:
        await eventually(ctx.settled(d))
        letters = {x.target: x for x in await d.delivery_log.dead_letters(10)}
    assert {x.webhook_id for x in letters.values()} == {event.webhook_id}
    kafka = letters[f"kafka:{topic}"]
    assert (kafka.outcome, kafka.code, kafka.attempts) == (
        Outcome.FAILED,
        "status_publish_refused",
        1,
    )
    # The receiver refuses 2 MiB too (413): one attempt, no retries either.
    hook = letters[ctx.receiver.url("/cb")]
    assert (hook.outcome, hook.code, hook.attempts) == (Outcome.FAILED, "webhook_rejected", 1)


async def test_subscriptions_match_tenant_and_event_type(ctx: Ctx) -> None:
    settings = notify_settings(
        subscriptions=(
            WebhookSubscription(url=ctx.receiver.url("/all")),
            WebhookSubscription(url=ctx.receiver.url("/acme"), tenant="acme"),
            WebhookSubscription(url=ctx.receiver.url("/other"), tenant="other"),
            WebhookSubscription(url=ctx.receiver.url("/failures"), events=("video.failed",)),
        )
    )
    done = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    failed = await ctx.finish("v2", type="video.failed")
    async with running(make_dispatcher(ctx, settings)) as d:
        await eventually(ctx.settled(d))
    by_path = {(r.path, r.webhook_id) for r in ctx.receiver.requests}
    assert by_path == {
        ("/cb", done.webhook_id),
        ("/all", done.webhook_id),
        ("/acme", done.webhook_id),
        ("/all", failed.webhook_id),
        ("/acme", failed.webhook_id),
        ("/failures", failed.webhook_id),
    }


async def test_retries_then_success_with_the_same_id(ctx: Ctx) -> None:
    ctx.receiver.script("/cb", [500, Reply(503, body="busy"), 200])
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    async with running(make_dispatcher(ctx, notify_settings())) as d:
        await eventually(ctx.settled(d))
        attempts = await attempts_of(d, event)
    got = ctx.receiver.at("/cb")
    assert [r.status for r in got] == [500, 503, 200]
    assert {r.webhook_id for r in got} == {event.webhook_id}
    assert len({r.body for r in got}) == 1
    for r in got:
        Webhook(SECRET).verify(r.body, r.headers)
    assert [(a.attempt, a.outcome, a.status_code) for a in attempts] == [
        (1, Outcome.RETRY, 500),
        (2, Outcome.RETRY, 503),
        (3, Outcome.DELIVERED, 200),
    ]
    assert attempts[0].next_retry_at is not None
    assert attempts[1].detail == "HTTP 503"  # the status line, never the endpoint's body


async def test_gone_endpoint_is_disabled_and_remembered(ctx: Ctx) -> None:
    ctx.receiver.script("/gone", [410])
    url = ctx.receiver.url("/gone")
    first = await ctx.finish("v1", callback=url)
    async with running(make_dispatcher(ctx, notify_settings())) as d:
        await eventually(ctx.settled(d))
        second = await ctx.finish("v2", callback=url)
        await eventually(ctx.settled(d))
        state = await d.delivery_log.endpoint(url)
        [a1] = await attempts_of(d, first)
        [a2] = await attempts_of(d, second)
        letters = await d.delivery_log.dead_letters()
    assert len(ctx.receiver.at("/gone")) == 1  # nothing more is sent to it
    assert state is not None
    assert state.disabled
    assert state.disabled_reason == "webhook_endpoint_gone"
    assert (a1.outcome, a1.status_code) == (Outcome.DISABLED, 410)
    assert (a2.outcome, a2.code, a2.status_code) == (
        Outcome.DISABLED,
        "webhook_endpoint_disabled",
        None,
    )
    assert {d.webhook_id for d in letters} == {first.webhook_id, second.webhook_id}


async def test_endpoint_disabled_after_consecutive_failures(ctx: Ctx) -> None:
    ctx.receiver.script("/flaky", [500] * 10)
    settings = notify_settings(disable_after_failures=2, retry_schedule_s=(0.1,) * 5)
    event = await ctx.finish("v1", callback=ctx.receiver.url("/flaky"))
    async with running(make_dispatcher(ctx, settings)) as d:
        await eventually(ctx.settled(d))
        attempts = await attempts_of(d, event)
        state = await d.delivery_log.endpoint(ctx.receiver.url("/flaky"))
    assert [(a.attempt, a.outcome) for a in attempts] == [
        (1, Outcome.RETRY),
        (2, Outcome.DISABLED),
    ]
    assert state is not None
    assert (state.disabled, state.disabled_reason, state.consecutive_failures) == (
        True,
        "webhook_endpoint_failing",
        2,
    )
    assert len(ctx.receiver.at("/flaky")) == 2


async def test_retry_after_is_honoured(ctx: Ctx) -> None:
    # The schedule alone would wait 60 s; the endpoint asks for 1 s.
    ctx.receiver.script("/cb", [Reply(429, {"Retry-After": "1"}), 200])
    settings = notify_settings(retry_schedule_s=(60.0,), jitter=0.0)
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    async with running(make_dispatcher(ctx, settings)) as d:
        await eventually(ctx.settled(d))
        first, second = await attempts_of(d, event)
    assert (first.outcome, first.status_code) == (Outcome.RETRY, 429)
    assert first.next_retry_at is not None
    assert (first.next_retry_at - first.at).total_seconds() == pytest.approx(1.0, abs=0.05)
    assert second.outcome is Outcome.DELIVERED
    assert second.at >= first.next_retry_at


async def test_redirect_is_a_failure_and_ends_dead_lettered(ctx: Ctx) -> None:
    ctx.receiver.script("/cb", [Reply(302, {"Location": ctx.receiver.url("/elsewhere")})] * 5)
    settings = notify_settings(retry_schedule_s=(0.1, 0.2))
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    async with running(make_dispatcher(ctx, settings)) as d:
        await eventually(ctx.settled(d))
        attempts = await attempts_of(d, event)
        [letter] = await d.delivery_log.dead_letters()
    assert ctx.receiver.at("/elsewhere") == []
    assert len(ctx.receiver.at("/cb")) == 3
    assert [a.outcome for a in attempts] == [Outcome.RETRY, Outcome.RETRY, Outcome.DEAD_LETTERED]
    assert attempts[-1].code == "retries_exhausted:webhook_redirect_refused"
    assert (letter.webhook_id, letter.event, letter.attempts) == (event.webhook_id, event, 3)


async def test_rejected_message_is_not_retried(ctx: Ctx) -> None:
    ctx.receiver.script("/cb", [Reply(422, body="unknown field")])
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    async with running(make_dispatcher(ctx, notify_settings())) as d:
        await eventually(ctx.settled(d))
        [attempt] = await attempts_of(d, event)
    assert (attempt.outcome, attempt.code, attempt.detail) == (
        Outcome.FAILED,
        "webhook_rejected",
        "HTTP 422",
    )
    assert len(ctx.receiver.requests) == 1


async def test_credentials_in_the_url_are_sent_but_never_logged(ctx: Ctx) -> None:
    url = f"http://hook:s3cret@127.0.0.1:{ctx.receiver.port}/cb"
    event = await ctx.finish("v1", callback=url)
    async with running(make_dispatcher(ctx, notify_settings())) as d:
        await eventually(ctx.settled(d))
        [attempt] = await attempts_of(d, event)
        endpoints = await d.delivery_log.endpoints()
    [got] = ctx.receiver.requests
    assert got.headers["authorization"].startswith("Basic ")
    assert attempt.target == f"http://***@127.0.0.1:{ctx.receiver.port}/cb"
    assert attempt.outcome is Outcome.DELIVERED
    assert all("s3cret" not in e.url for e in endpoints)


async def test_private_target_refused_when_not_allowed(ctx: Ctx) -> None:
    settings = notify_settings(allow_private_targets=False)
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    async with running(make_dispatcher(ctx, settings)) as d:
        await eventually(ctx.settled(d))
        [attempt] = await attempts_of(d, event)
    assert (attempt.outcome, attempt.code) == (Outcome.FAILED, "webhook_target_refused")
    assert ctx.receiver.requests == []


async def test_receiver_down_then_up_every_event_delivered_once_by_id(ctx: Ctx) -> None:
    await ctx.receiver.stop()  # the port is closed: connections are refused
    url = ctx.receiver.url("/cb")
    events = [await ctx.finish(f"v{i}", callback=url) for i in range(6)]
    settings = notify_settings(retry_schedule_s=(0.2, 0.5, 1.0, 2.0, 4.0))
    async with running(make_dispatcher(ctx, settings)) as d:

        async def all_failed_once() -> bool:
            return all([await attempts_of(d, e) for e in events])

        await eventually(all_failed_once)
        await ctx.receiver.start()
        await eventually(ctx.settled(d))
        first_attempts = [(await attempts_of(d, e))[0] for e in events]
    assert {a.code for a in first_attempts} == {"webhook_connect_failed"}
    assert ctx.receiver.delivered_ids("/cb") == {e.webhook_id for e in events}
    assert len(ctx.receiver.requests) == len(events)


async def test_crash_before_delivery_then_restart_resumes_with_the_same_id(ctx: Ctx) -> None:
    ctx.receiver.script("/cb", [500] * 3)
    settings = notify_settings(retry_schedule_s=(2.0, 0.2, 0.2))
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    log1 = ctx.redis_log()
    async with running(make_dispatcher(ctx, settings, delivery_log=log1)) as first:
        await ctx.receiver.wait_for(1)
        await eventually(lambda: _has_attempts(first, event, 1))
    # Stopped mid-retry: the entry is acked, its retry waits in the log's schedule.
    assert await ctx.outbox_len() == 0
    assert await log1.scheduled() == 1
    await log1.close()
    ctx.receiver.clear_scripts()
    log2 = ctx.redis_log()
    async with running(make_dispatcher(ctx, settings, delivery_log=log2)) as second:
        await eventually(ctx.settled(second))
        attempts = await attempts_of(second, event)
    await log2.close()
    assert [r.webhook_id for r in ctx.receiver.requests] == [event.webhook_id] * 2
    # The restart resumed the schedule from the log: attempt 2, not a fresh attempt 1.
    assert [(a.attempt, a.outcome) for a in attempts] == [
        (1, Outcome.RETRY),
        (2, Outcome.DELIVERED),
    ]


async def test_stop_lets_an_attempt_under_way_finish_and_ack(ctx: Ctx) -> None:
    ctx.receiver.script("/slow", [Reply(200, delay_s=0.5)])
    event = await ctx.finish("v1", callback=ctx.receiver.url("/slow"))
    dispatcher = make_dispatcher(ctx, notify_settings(drain_timeout_s=5.0))
    task = asyncio.create_task(dispatcher.run())
    await eventually(lambda: _request_started(ctx))
    await dispatcher.stop()
    await asyncio.wait_for(task, 10)
    assert ctx.receiver.delivered_ids() == {event.webhook_id}
    assert await ctx.all_acked()
    assert dispatcher.acked == 1


async def _request_started(ctx: Ctx) -> bool:
    """The receiver holds a request (its reply is delayed) but has not answered yet."""
    return ctx.receiver.in_flight > 0


async def test_stop_cuts_an_attempt_that_outlasts_the_drain(ctx: Ctx) -> None:
    ctx.receiver.script("/stuck", [Reply(200, delay_s=5)])
    await ctx.finish("v1", callback=ctx.receiver.url("/stuck"))
    dispatcher = make_dispatcher(ctx, notify_settings(drain_timeout_s=0.2, timeout_s=10))
    task = asyncio.create_task(dispatcher.run())
    await eventually(lambda: _request_started(ctx))
    await dispatcher.stop()
    await asyncio.wait_for(task, 10)
    assert await ctx.outbox_len() == 1  # left for a restart
    assert dispatcher.acked == 0


async def _has_attempts(d: NotificationDispatcher, event: OutboxEvent, n: int) -> bool:
    return len(await attempts_of(d, event)) >= n


class _DownPublisher(StatusTopicPublisher):
    """A status topic on a broker that is not there: publishing never succeeds."""

    def __init__(self) -> None:
        super().__init__(
            KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", status_topic="down"),
            request_timeout_ms=500,
        )


@pytest.mark.parametrize("durable_log", [False, True])
async def test_crash_after_delivery_before_ack(
    ctx: Ctx, kafka_bootstrap: str, unique: str, durable_log: bool
) -> None:
    """Delivered, then stopped before the ack (the status topic was down). After the restart
    the event is published and acked; the webhook is sent again with the same id unless the
    delivery log (Redis) remembers it was delivered."""
    topic = f"status-{unique}"
    await create_topic(kafka_bootstrap, topic)
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    log1 = ctx.redis_log() if durable_log else MemoryDeliveryLog()
    async with running(
        make_dispatcher(ctx, notify_settings(), publisher=_DownPublisher(), delivery_log=log1)
    ):
        await ctx.receiver.wait_for(1)
        await asyncio.sleep(0.3)  # the publisher keeps failing; nothing is acked
    await log1.close()
    assert await ctx.outbox_len() == 1
    publisher = StatusTopicPublisher(KafkaSettings(bootstrap=kafka_bootstrap, status_topic=topic))
    log2 = ctx.redis_log() if durable_log else MemoryDeliveryLog()
    async with running(
        make_dispatcher(ctx, notify_settings(), publisher=publisher, delivery_log=log2)
    ) as d:
        await eventually(ctx.settled(d))
    await log2.close()
    ids = [r.webhook_id for r in ctx.receiver.requests]
    assert ids == [event.webhook_id] * (1 if durable_log else 2)
    assert ctx.receiver.delivered_ids() == {event.webhook_id}
    [record] = await read_records(kafka_bootstrap, topic, 1)
    assert dict(record.headers)["webhook-id"].decode() == event.webhook_id


async def test_entries_of_a_vanished_notifier_are_taken_over(ctx: Ctx) -> None:
    """The notifier went away during its first attempt (cut, not answered): its entry, left
    unacked, is taken over once idle for reclaim_after_s and sent by the survivor."""
    ctx.receiver.script("/cb", [Reply(200, delay_s=5)])
    settings = notify_settings(reclaim_after_s=0.3, reclaim_interval_s=0.2, drain_timeout_s=0)
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    async with running(make_dispatcher(ctx, settings, name="gone")):
        await eventually(lambda: _request_started(ctx))
    assert await ctx.outbox_len() == 1
    async with running(make_dispatcher(ctx, settings, name="survivor")) as survivor:
        await eventually(ctx.settled(survivor))
    assert {r.webhook_id for r in ctx.receiver.requests} == {event.webhook_id}
    assert ctx.receiver.delivered_ids() == {event.webhook_id}


async def test_two_live_notifiers_send_each_attempt_once(ctx: Ctx) -> None:
    """Retries wait longer than reclaim_after_s: the holder renews its hold, so the other
    notifier never takes the entry over, and every attempt goes out once."""
    ctx.receiver.script("/cb", [500, 500])
    settings = notify_settings(
        retry_schedule_s=(1.5, 1.5), reclaim_after_s=1.0, reclaim_interval_s=0.1
    )
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    log1, log2 = ctx.redis_log(), ctx.redis_log()  # one log in Redis, as in production
    async with (
        running(make_dispatcher(ctx, settings, name="n1", delivery_log=log1)) as first,
        running(make_dispatcher(ctx, settings, name="n2", delivery_log=log2)),
    ):
        await eventually(ctx.settled(first))  # one log: first's schedule is both's
    assert [r.status for r in ctx.receiver.requests] == [500, 500, 200]
    attempts = await log1.attempts(event.webhook_id)
    assert [(a.attempt, a.outcome) for a in attempts] == [
        (1, Outcome.RETRY),
        (2, Outcome.RETRY),
        (3, Outcome.DELIVERED),
    ]
    await log1.close()
    await log2.close()


async def test_a_retry_held_by_a_notifier_that_went_away_is_made_by_another(ctx: Ctx) -> None:
    """A notifier took a due retry from the schedule and went away before making it (or
    stalled past its hold): once the hold of reclaim_after_s runs out the retry is due again,
    and the live notifier makes that attempt, once."""
    ctx.receiver.script("/cb", [500])
    settings = notify_settings(
        retry_schedule_s=(1.0,), jitter=0.0, reclaim_after_s=1.0, reclaim_interval_s=0.2
    )
    event = await ctx.finish("v1", callback=ctx.receiver.url("/cb"))
    log1, log2 = ctx.redis_log(), ctx.redis_log()
    async with running(make_dispatcher(ctx, settings, name="n1", delivery_log=log1)):
        await ctx.receiver.wait_for(1)
        await eventually(ctx.all_acked)  # stopped before its retry is due
    await asyncio.sleep(1.1)
    [held] = await log1.take_due(time.time(), limit=10, hold_s=1.0)  # n1's last act
    assert (held.event.webhook_id, held.attempt) == (event.webhook_id, 2)
    async with running(make_dispatcher(ctx, settings, name="n2", delivery_log=log2)) as second:
        await asyncio.sleep(0.5)
        assert len(ctx.receiver.requests) == 1  # still held by n1
        await eventually(ctx.settled(second))
    assert [r.status for r in ctx.receiver.requests] == [500, 200]
    assert [a.attempt for a in await log2.attempts(event.webhook_id)] == [1, 2]
    await log1.close()
    await log2.close()


async def test_a_retrying_endpoint_does_not_hold_back_other_events(ctx: Ctx) -> None:
    ctx.receiver.script("/slow", [500])
    settings = notify_settings(retry_schedule_s=(30.0,))
    await ctx.finish("v1", callback=ctx.receiver.url("/slow"))
    async with running(make_dispatcher(ctx, settings)):
        await ctx.receiver.wait_for(1, path="/slow")
        fast = await ctx.finish("v2", callback=ctx.receiver.url("/fast"))
        await ctx.receiver.wait_for(1, path="/fast", timeout_s=5)
    assert ctx.receiver.delivered_ids("/fast") == {fast.webhook_id}


def test_targets_for_deduplicates_and_filters() -> None:
    subs = (
        WebhookSubscription(url="http://a/1"),
        WebhookSubscription(url="http://cb/1", tenant="acme"),
        WebhookSubscription(url="http://b/1", tenant="other"),
        WebhookSubscription(url="http://c/1", events=("video.failed",)),
    )
    event = make_event(callback_url="http://cb/1")
    assert targets_for(event, subs) == ["http://cb/1", "http://a/1"]
    assert targets_for(make_event(type="video.failed", tenant="other"), subs) == [
        "http://a/1",
        "http://b/1",
        "http://c/1",
    ]
    assert targets_for(make_event(), ()) == []


async def test_a_dead_endpoint_of_one_tenant_stops_no_other_tenants_webhooks(
    ctx: Ctx, kafka_bootstrap: str, unique: str
) -> None:
    """acme's endpoint takes connections and never answers; its retries wait in the schedule,
    not in hand: with room for 3 entries in hand, 12 of acme's events come first, and
    globex's events behind them are still delivered at once. acme's endpoint never holds more
    than its share of the connections, and all of acme's messages wait to be retried."""
    hole = await Blackhole().start()
    dead = hole.url()
    settings = notify_settings(
        max_pending_events=3,
        max_concurrency=6,
        max_concurrency_per_endpoint=2,
        timeout_s=1.0,
        retry_schedule_s=(3600.0,),
    )
    acme = [await ctx.finish(f"a{i}", callback=dead) for i in range(12)]
    globex = [
        await ctx.finish(f"g{i}", callback=ctx.receiver.url("/globex"), tenant="globex")
        for i in range(3)
    ]
    log = ctx.redis_log()
    try:
        async with running(make_dispatcher(ctx, settings, delivery_log=log)) as d:
            await ctx.receiver.wait_for(3, path="/globex", timeout_s=30)
            await eventually(ctx.all_acked, timeout_s=30)
            assert await log.scheduled() == len(acme)
            assert d.pending == 0
    finally:
        await hole.stop()
        await log.close()
    assert ctx.receiver.delivered_ids("/globex") == {e.webhook_id for e in globex}
    assert hole.most_open <= 2
    assert hole.accepted >= 2  # its first attempts were made, as its share allowed


async def test_a_disabled_endpoint_is_announced_to_its_tenant_on_the_status_topic(
    ctx: Ctx, kafka_bootstrap: str, unique: str
) -> None:
    ctx.receiver.script("/gone", [410])
    topic, publisher = await new_status_topic(kafka_bootstrap, unique)
    url = ctx.receiver.url("/gone")
    await ctx.finish("v1", callback=url, tenant="acme")
    async with running(make_dispatcher(ctx, notify_settings(), publisher=publisher)) as d:
        await eventually(ctx.settled(d))
        records = await read_records(kafka_bootstrap, topic, 2)
    notices = [json.loads(r.value) for r in records if b"endpoint.disabled" in r.value]
    assert len(notices) == 1
    [notice] = notices
    assert notice["type"] == "endpoint.disabled"
    assert notice["data"]["tenant"] == "acme"
    assert notice["data"]["endpoint"] == url
    assert notice["data"]["reason"] == "webhook_endpoint_gone"
