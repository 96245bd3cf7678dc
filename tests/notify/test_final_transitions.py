"""Final transitions made by the real processor, announced by the real dispatcher: each one is
its own message, and nothing shown of a failure carries the source URL's secrets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from checkpoint.base import VideoState
from checkpoint.chunk_store import ChunkStore
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from devkit.receiver import WebhookReceiver
from notify.delivery_log import RedisDeliveryLog
from notify.dispatcher import NotificationDispatcher
from notify.webhooks import WebhookSender
from runtime.local_executor import LocalExecutor
from runtime.processor import VideoProcessor
from runtime.results import LocalResults
from stages.pipeline import Pipeline
from storage.local import LocalObjectStore
from tests.notify.support import notify_settings

SECRETS = ("pa55word", "0ddc0ffee", "AKIDEXAMPLE")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> ServiceConfig:
    root = tmp_path_factory.mktemp("transitions")
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"ft-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"allow_private": True},
        runtime={"workdir": str(root / "work"), "executor": "local", "max_attempts": 1},
    )


@pytest.fixture(scope="module")
async def processor(config: ServiceConfig) -> AsyncIterator[VideoProcessor]:
    executor, results = LocalExecutor(config), LocalResults(config)
    yield VideoProcessor(
        store=RedisCheckpointStore(config.redis),
        executor=executor,
        results=results,
        chunks=ChunkStore(LocalObjectStore(config.storage.object_store_uri)),
        lineage=Pipeline.from_config(config).lineage,
        settings=config.runtime,
    )
    await executor.close()
    await results.close()


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    receiver = await WebhookReceiver().start()
    yield receiver
    await receiver.stop()


@contextlib.asynccontextmanager
async def dispatching(config: ServiceConfig, redis_url: str) -> AsyncIterator[None]:
    """The real dispatcher on the processor's outbox, its delivery log in the same Redis."""
    store = RedisCheckpointStore(config.redis)
    settings = notify_settings()
    log = RedisDeliveryLog(aioredis.Redis.from_url(redis_url), key_prefix=config.redis.key_prefix)
    dispatcher = NotificationDispatcher(
        store, WebhookSender(settings), None, settings, "n1", delivery_log=log
    )
    task = asyncio.create_task(dispatcher.run())
    try:
        yield
    finally:
        await dispatcher.stop()
        await asyncio.wait_for(task, 10)
        await store.close()


async def test_a_second_failure_is_a_new_message_and_a_retry_keeps_its_id(
    config: ServiceConfig,
    processor: VideoProcessor,
    receiver: WebhookReceiver,
    redis_url: str,
    tmp_path: Path,
    unique: str,
) -> None:
    receiver.script("/cb", [500, 200, 200])  # the first message is retried once
    ref = VideoRef(
        f"twice-{unique}", (tmp_path / "missing.mp4").as_uri(), callback_url=receiver.url("/cb")
    )
    async with dispatching(config, redis_url):
        await processor.process(ref)
        await receiver.wait_for(2, path="/cb")
        await processor.process(ref)  # resubmitted, and it fails again
        await receiver.wait_for(3, path="/cb")
    got = receiver.at("/cb")
    assert [r.status for r in got] == [500, 200, 200]
    first, retry, second = (r.webhook_id for r in got)
    assert first == retry
    assert second != first
    assert {json.loads(r.body)["type"] for r in got} == {"video.failed"}


async def test_a_failed_source_is_shown_without_its_secrets(
    config: ServiceConfig,
    processor: VideoProcessor,
    receiver: WebhookReceiver,
    redis_url: str,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver.script("/in/clip.mp4", [404])  # the receiver is the source's origin too
    source_port = receiver.port
    uri = (
        f"http://user:pa55word@127.0.0.1:{source_port}/in/clip.mp4"
        "?X-Amz-Signature=0ddc0ffee&X-Amz-Credential=AKIDEXAMPLE"
    )
    ref = VideoRef(f"secret-{unique}", uri, callback_url=receiver.url("/cb"))
    caplog.set_level(logging.DEBUG)
    async with dispatching(config, redis_url):
        await processor.process(ref)
        await receiver.wait_for(1, path="/cb")
    store = RedisCheckpointStore(config.redis)
    status = await store.get(ref.video_id)
    await store.close()
    assert status is not None
    assert status.status is VideoState.FAILED
    assert status.error_code == "source_not_found"
    [webhook] = receiver.at("/cb")
    data = json.loads(webhook.body)["data"]
    assert data["uri"] == f"http://***@127.0.0.1:{source_port}/in/clip.mp4?***"
    shown = [status.error_message or "", data["error"]["message"], data["uri"], caplog.text]
    assert f"127.0.0.1:{source_port}/in/clip.mp4" in (status.error_message or "")  # says which
    for text in shown:
        for secret in SECRETS:
            assert secret not in text
