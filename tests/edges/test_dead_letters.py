"""Dead letters: listing and replay of invalid upload events (Kafka) and webhooks (Redis log).

Real broker and Redis; the webhook target is a verifying receiver on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer
from fastapi import FastAPI

from api.app import api_server, create_app
from api.dead_letters import REPLAYED_FROM, DeadLetterSource
from checkpoint.base import OutboxEvent
from checkpoint.redis_store import RedisCheckpointStore
from cli.main import main as cli_main
from consumers.admin import ensure_topics
from consumers.base import RecordInfo
from consumers.dead_letter import DeadLetterPublisher
from consumers.errors import InvalidEvent
from core.config import KafkaSettings, NotifySettings, ServiceConfig
from devkit.receiver import WebhookReceiver
from devkit.run_config import webhook_secret
from devkit.services import free_port
from notify.base import DeadLetter, Outcome
from notify.delivery_log import RedisDeliveryLog
from notify.replay import WebhookReplayer
from notify.webhooks import WebhookSender

TOKENS = {"token-a": "acme", "token-b": "globex"}
A = {"authorization": "Bearer token-a"}
B = {"authorization": "Bearer token-b"}


@dataclass
class Setup:
    kafka: KafkaSettings
    log: RedisDeliveryLog
    source: DeadLetterSource
    receiver: WebhookReceiver
    store: RedisCheckpointStore


def _event(video_id: str, tenant: str, target: str | None = None) -> OutboxEvent:
    return OutboxEvent(
        type="video.failed",
        video_id=video_id,
        tenant=tenant,
        pipeline_version="pv-1",
        callback_url=target,
        data={"error": {"code": "invalid_video", "message": "not a video"}},
        timestamp=datetime.now(UTC),
    )


def _letter(event: OutboxEvent, target: str, attempts: int = 8) -> DeadLetter:
    return DeadLetter(
        webhook_id=event.webhook_id,
        target=target,
        event=event,
        outcome=Outcome.DEAD_LETTERED,
        code="retries_exhausted:webhook_connect_failed",
        detail="connection refused",
        attempts=attempts,
        at=datetime.now(UTC),
    )


@pytest.fixture
async def setup(kafka_bootstrap: str, redis_url: str, unique: str) -> AsyncIterator[Setup]:
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap,
        topic=f"dl-uploads-{unique}",
        dead_letter_topic=f"dl-uploads-{unique}.dlq",
        group_id=f"dl-group-{unique}",
    )
    await ensure_topics(kafka_bootstrap, {kafka.topic: 1, kafka.dead_letter_topic: 2})
    secret = webhook_secret()
    receiver = await WebhookReceiver(secret=secret).start()
    notify = NotifySettings(webhook_secrets=(secret,), allow_private_targets=True)  # type: ignore[arg-type]
    log = RedisDeliveryLog(
        aioredis.Redis.from_url(redis_url), key_prefix=f"dl-{unique}", owns_client=True
    )
    source = DeadLetterSource(kafka, log, WebhookReplayer(log, WebhookSender(notify), notify))
    store = RedisCheckpointStore.from_url(redis_url, key_prefix=f"dl-{unique}")
    yield Setup(kafka, log, source, receiver, store)
    await source.close()
    await store.close()
    await receiver.stop()


async def _dead_letter(
    kafka: KafkaSettings, partition: int, key: bytes | None, value: bytes | None, code: str
) -> None:
    record = RecordInfo(kafka.topic, 0, partition * 100, key, int(time.time() * 1000))
    async with DeadLetterPublisher(kafka) as publisher:
        await publisher.publish(
            record,
            value,
            InvalidEvent("bad event", code=code, video_id=None),
            original_headers=[("trace-id", b"t-1")],
        )


async def _fill(setup: Setup) -> dict[str, str]:
    """Two events and two webhooks of two tenants, one unattributable event; their ids."""
    kafka = setup.kafka
    await _dead_letter(
        kafka, 0, b"acme-1", b'{"video_id": "acme-1", "tenant": "acme", "uri": 1}', "event_invalid"
    )
    await _dead_letter(
        kafka, 1, b"glob-1", b'{"video_id": "glob-1", "tenant": "globex"}', "event_invalid"
    )
    await _dead_letter(kafka, 2, None, b"\x00 not json", "event_not_json")
    down = f"http://127.0.0.1:{free_port()}/hooks"
    await setup.log.add_dead_letter(_letter(_event("acme-2", "acme"), setup.receiver.url()))
    await setup.log.add_dead_letter(_letter(_event("glob-2", "globex"), down))
    listed = await setup.source.newest(None, 50)
    return {d.video_id or d.code: d.id for d in listed}


def _app(setup: Setup, **options: Any) -> FastAPI:
    """The API over the setup's store and dead-letter source, with the two tenants' tokens."""
    return create_app(
        setup.store,
        tokens=TOKENS,
        dead_letters=setup.source.newest,
        replay=setup.source.replay,
        **options,
    )


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://api", timeout=60)


async def test_lists_both_kinds_newest_first_with_spring_headers(setup: Setup) -> None:
    ids = await _fill(setup)
    everything = await setup.source.newest(None, 50)
    assert [d.kind for d in everything].count("event") == 3
    assert [d.kind for d in everything].count("webhook") == 2
    assert everything == sorted(everything, key=lambda d: d.at, reverse=True)  # type: ignore[arg-type, return-value]
    acme = next(d for d in everything if d.video_id == "acme-1")
    assert acme.id.startswith("event:")
    assert (acme.tenant, acme.code, acme.message) == ("acme", "event_invalid", "bad event")
    assert acme.data["original_topic"] == setup.kafka.topic
    assert acme.data["exception"] == "consumers.errors.InvalidEvent"
    assert acme.data["consumer_group"] == setup.kafka.group_id
    stray = next(d for d in everything if d.code == "event_not_json")
    assert stray.tenant is None
    assert stray.video_id is None
    hook = next(d for d in everything if d.video_id == "acme-2")
    assert hook.code == "retries_exhausted:webhook_connect_failed"
    assert ids["acme-2"] == hook.id


async def test_each_tenant_sees_its_own(setup: Setup) -> None:
    await _fill(setup)
    acme = await setup.source.newest("acme", 50)
    assert {d.video_id for d in acme} == {"acme-1", "acme-2"}
    assert all(d.tenant == "acme" for d in acme)
    globex = await setup.source.newest("globex", 50)
    assert {d.video_id for d in globex} == {"glob-1", "glob-2"}
    # A shared subscription's URL stays hidden from tenants.
    assert all("target" not in d.data for d in globex if d.kind == "webhook")
    assert len(await setup.source.newest(None, 2)) == 2


async def test_event_replay_publishes_the_original_record(setup: Setup) -> None:
    ids = await _fill(setup)
    assert await setup.source.replay(ids["acme-1"], "globex") is None  # another tenant's
    result = await setup.source.replay(ids["acme-1"], "acme")
    assert result is not None
    assert (result.kind, result.outcome) == ("event", "published")
    consumer = AIOKafkaConsumer(
        setup.kafka.topic, bootstrap_servers=setup.kafka.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert record.key == b"acme-1"
    assert json.loads(record.value or b"") == {"video_id": "acme-1", "tenant": "acme", "uri": 1}
    headers = dict(record.headers)
    assert headers["trace-id"] == b"t-1"
    assert headers[REPLAYED_FROM].startswith(setup.kafka.dead_letter_topic.encode())
    assert not [k for k in headers if k.startswith("kafka_dlt-")]


async def test_webhook_replay_delivers_the_same_message_once_more(setup: Setup) -> None:
    ids = await _fill(setup)
    event = _event("acme-2", "acme")
    assert await setup.source.replay(ids["acme-2"], "globex") is None
    result = await setup.source.replay(ids["acme-2"], "acme")
    assert result is not None
    assert (result.kind, result.outcome, result.code) == ("webhook", "delivered", None)
    [hook] = setup.receiver.requests
    assert hook.verified
    assert hook.webhook_id == event.webhook_id  # the same id as every earlier attempt
    assert hook.payload["data"]["error"]["code"] == "invalid_video"
    assert ids["acme-2"] not in {d.id for d in await setup.source.newest(None, 50)}
    [attempt] = await setup.log.attempts(event.webhook_id)
    assert (attempt.attempt, attempt.outcome) == (9, Outcome.DELIVERED)
    assert await setup.source.replay(ids["acme-2"], "acme") is None  # gone now


async def test_failed_webhook_replay_keeps_the_letter(setup: Setup) -> None:
    ids = await _fill(setup)
    result = await setup.source.replay(ids["glob-2"], None)
    assert result is not None
    assert (result.outcome, result.code) == ("failed", "webhook_connect_failed")
    [kept] = [d for d in await setup.source.newest("globex", 50) if d.id == ids["glob-2"]]
    assert kept.data["attempts"] == 9
    assert kept.code == "webhook_connect_failed"


async def test_unknown_ids_are_none(setup: Setup) -> None:
    await _fill(setup)
    for letter_id in ("event:0:999", "event:9:0", "event:x:y", "webhook:msg_x:abc", "other:1"):
        assert await setup.source.replay(letter_id, None) is None


async def test_letters_published_together_all_show_and_replay(setup: Setup) -> None:
    """Letters published at once share a record batch; the last of the partition still shows
    and replays (Tansu's ListOffsets counts a batch at the end of a partition as one record)."""
    kafka = setup.kafka
    async with DeadLetterPublisher(kafka) as publisher:
        await asyncio.gather(
            *(
                publisher.publish(
                    RecordInfo(kafka.topic, 0, n, f"ev-{n}".encode(), int(time.time() * 1000)),
                    json.dumps({"video_id": f"ev-{n}"}).encode(),
                    InvalidEvent("bad event", code="event_invalid", video_id=None),
                )
                for n in range(8)
            )
        )
    listed = await setup.source.newest(None, 50)
    assert sorted(d.data["original_offset"] for d in listed) == list(range(8))
    newest = max(listed, key=lambda d: (int(d.id.split(":")[1]), int(d.id.split(":")[2])))
    result = await setup.source.replay(newest.id, None)
    assert result is not None
    assert result.outcome == "published"


async def test_api_and_cli(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    ids = await _fill(setup)
    app = _app(setup)
    async with _client(app) as client:
        listed = (await client.get("/v1/dead-letters", headers=A)).json()["items"]
        assert {d["video_id"] for d in listed} == {"acme-1", "acme-2"}
        refused = await client.post(f"/v1/dead-letters/{ids['acme-1']}/replay", headers=B)
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "not_found"
        anonymous = await client.post(f"/v1/dead-letters/{ids['acme-1']}/replay")
        assert anonymous.status_code == 401
        replayed = await client.post(f"/v1/dead-letters/{ids['acme-1']}/replay", headers=A)
        assert replayed.status_code == 200
        assert replayed.json()["outcome"] == "published"

    port = free_port()
    server = api_server(app, "127.0.0.1", port)
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.02)
    try:
        api = ["--api", f"http://127.0.0.1:{port}", "--token", "token-a"]
        code = await asyncio.to_thread(cli_main, ["dead-letters", *api])
        assert code == 0
        out = capsys.readouterr().out
        assert ids["acme-1"] in out
        assert ids["acme-2"] in out
        assert ids["glob-2"] not in out
        code = await asyncio.to_thread(cli_main, ["dead-letters", *api, "--replay", ids["acme-2"]])
        assert code == 0
        assert json.loads(capsys.readouterr().out)["outcome"] == "delivered"
    finally:
        server.should_exit = True
        await serving


def test_replica_config_keeps_secrets() -> None:
    """The API replica is built from JSON: tokens and webhook secrets must arrive intact."""
    a, b, c = ("a" * 32, "b" * 40, "c" * 43)
    config = ServiceConfig.load(
        api={"tenant_tokens": {"acme": [a], "globex": [b, c]}},
        notify={"webhook_secrets": [webhook_secret()]},
    )
    rebuilt = ServiceConfig.model_validate_json(config.to_replica_json())
    assert rebuilt == config
    assert rebuilt.api.bearer_tokens() == {a: "acme", b: "globex", c: "globex"}
    WebhookSender(rebuilt.notify)  # decodes every secret


async def test_listings_share_a_scan_for_a_moment(setup: Setup) -> None:
    """Callers within cache_s of a scan share it (one Kafka read for many); a letter parked
    after it shows from the next scan on, and a replay starts one at once."""
    source = DeadLetterSource(setup.kafka, setup.log, cache_s=30.0)
    ids = await _fill(setup)
    first = await source.newest(None, 50)
    await _dead_letter(setup.kafka, 0, b"late-1", b'{"video_id": "late-1"}', "event_invalid")
    assert await source.newest(None, 50) == first  # the same scan
    assert await source.replay(ids["acme-1"], "acme") is not None
    assert "late-1" in {d.video_id for d in await source.newest(None, 50)}


async def test_replays_are_rate_limited_per_tenant(setup: Setup) -> None:
    ids = await _fill(setup)
    async with _client(_app(setup, replays_per_minute=2)) as client:
        replay = f"/v1/dead-letters/{ids['acme-1']}/replay"
        answers = [(await client.post(replay, headers=A)).status_code for _ in range(3)]
        refused = await client.post(replay, headers=A)
        other = await client.post(f"/v1/dead-letters/{ids['glob-1']}/replay", headers=B)
    assert answers == [200, 200, 429]
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_replays"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert other.status_code == 200  # another tenant's budget is its own
