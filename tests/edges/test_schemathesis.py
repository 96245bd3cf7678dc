"""The progress API against its own OpenAPI schema, with schemathesis, over HTTP.

uvicorn serves the API on 127.0.0.1 from a thread (its own event loop) over a real Redis
store holding a few videos (one done, its result document in a folder object store), with
the real dead-letter source (Kafka and the Redis delivery log) behind the dead-letter
routes. Every operation gets generated valid and invalid inputs; each answer must be no
server error and match the documented status codes, content types and bodies. The event
streams never end by themselves and are left out here (their tests are in
tests/api/test_api.py).

Bounded: a few dozen examples per operation, so the run takes well under a minute.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from api.app import api_server, create_app
from api.dead_letters import DeadLetterSource
from checkpoint.base import OutboxEvent
from checkpoint.redis_store import RedisCheckpointStore
from consumers.admin import ensure_topics
from core.config import KafkaSettings
from core.records import VideoRef
from core.search import Method, SearchFilter, SegmentHit
from devkit.services import free_port
from notify.delivery_log import RedisDeliveryLog
from sinks.object_store import ResultDocumentSink
from storage.base import ObjectStore
from storage.local import LocalObjectStore
from tests.sinks import make_result

TOKEN = "schema-token"
PIPELINE = "pv-schema"


@dataclass
class Served:
    base: str


async def _search(query: str, k: int, where: SearchFilter, method: Method) -> list[SegmentHit]:
    """A fixed index of three places (the model-backed search is tested with its index)."""
    places = [
        SegmentHit(f"clip-{i}", t, float(i), i + 1.5, f"text {i} of {t}", ("text",), 0.1 * i, i)
        for i, t in enumerate(("acme", "acme", "globex"))
    ]
    return [hit for hit in places if where.tenant in (None, hit.tenant)][:k]


async def _records(store: RedisCheckpointStore) -> None:
    for i, tenant in enumerate(("acme", "acme", "globex")):
        ref = VideoRef(f"clip-{i}", f"file:///videos/clip-{i}.mp4", tenant)
        await store.mark_queued(ref, PIPELINE)
        claim = await store.claim(ref, PIPELINE)
        await store.advance(ref.video_id, claim.epoch, "ocr", 1, 2)
        if i == 0:
            event = OutboxEvent(
                type="video.done",
                video_id=ref.video_id,
                tenant=tenant,
                pipeline_version=PIPELINE,
                timestamp=datetime.now(UTC),
            )
            await store.mark_done(ref.video_id, claim.epoch, frames=2, timings={}, outbox=event)


def _serve(
    redis_url: str, prefix: str, kafka: KafkaSettings, port: int, results: ObjectStore
) -> Iterator[None]:
    """Runs the API in a thread with its own loop; yields once it listens."""
    ready = threading.Event()
    holder: dict[str, object] = {}

    def run() -> None:
        async def main() -> None:
            store = RedisCheckpointStore.from_url(redis_url, key_prefix=prefix)
            await _records(store)
            ResultDocumentSink(results).write(
                [make_result("clip-0", frames=3, tenant="acme", version=PIPELINE, embed=False)]
            )
            delivery_log = RedisDeliveryLog(
                aioredis.Redis.from_url(redis_url), key_prefix=prefix, owns_client=True
            )
            source = DeadLetterSource(kafka, delivery_log)
            app = create_app(
                store,
                tokens={TOKEN: "acme"},
                search=_search,
                dead_letters=source.newest,
                replay=source.replay,
                results=results,
                on_close=[source.close],
                owns_store=True,
                heartbeat_s=1.0,
            )
            server = api_server(app, "127.0.0.1", port)
            holder["server"] = server
            serving = asyncio.create_task(server.serve())
            while not server.started and not serving.done():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            ready.set()
            await serving

        asyncio.run(main())

    thread = threading.Thread(target=run, name="schemathesis-api", daemon=True)
    thread.start()
    assert ready.wait(60), "the API did not start"
    try:
        yield
    finally:
        server = holder.get("server")
        if server is not None:
            server.should_exit = True  # type: ignore[attr-defined]
        thread.join(30)


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    suffix = datetime.now(UTC).strftime("%H%M%S%f")
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap,
        topic=f"schema-{suffix}",
        dead_letter_topic=f"schema-{suffix}.dlq",
    )
    asyncio.run(ensure_topics(kafka_bootstrap, {kafka.topic: 1, kafka.dead_letter_topic: 1}))
    port = free_port()
    results = LocalObjectStore(tmp_path_factory.mktemp("results"))
    for _ in _serve(redis_url, f"schema-{suffix}", kafka, port, results):
        yield Served(f"http://127.0.0.1:{port}")


@pytest.fixture(scope="module")
def api_schema(served: Served) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(f"{served.base}/openapi.json")
    schema.config.update(base_url=served.base, headers={"Authorization": f"Bearer {TOKEN}"})
    # Event streams stay open until the client leaves.
    return schema.exclude(path_regex=r"/events$")


def _operations(
    schema: schemathesis.BaseSchema,
) -> list[schemathesis.APIOperation[Any, Any, Any, Any]]:
    return [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=lambda m: m.value)
def test_api_matches_its_schema(
    api_schema: schemathesis.BaseSchema, served: Served, mode: schemathesis.GenerationMode
) -> None:
    operations = _operations(api_schema)
    assert {op.path for op in operations} >= {
        "/v1/videos",
        "/v1/videos/{video_id}",
        "/v1/videos/{video_id}/result",
        "/v1/search",
        "/v1/dead-letters",
        "/v1/dead-letters/{letter_id}/replay",
        "/healthz",
    }
    for operation in operations:
        raw = operation.definition.raw
        if mode is schemathesis.GenerationMode.NEGATIVE and not raw.get("parameters"):
            continue  # nothing to get wrong (healthz, metrics)
        _fuzz(operation, mode, served.base)


def test_a_done_videos_result_matches_its_schema(
    api_schema: schemathesis.BaseSchema, served: Served
) -> None:
    """Generated ids do not find the one done video; its answers are checked here."""
    operation = api_schema["/v1/videos/{video_id}/result"]["GET"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for query in ({}, {"frames": "true"}):
        case = operation.Case(path_parameters={"video_id": "clip-0"}, query=query, headers=auth)
        response = case.call_and_validate(base_url=served.base, timeout=30)
        assert response.status_code == 200
        assert response.json()["text_spans"]
        [tag] = response.headers["etag"]  # schemathesis lists each header's values
        again = operation.Case(
            path_parameters={"video_id": "clip-0"},
            query=query,
            headers={**auth, "If-None-Match": tag},
        )
        assert again.call_and_validate(base_url=served.base, timeout=30).status_code == 304


def _fuzz(
    operation: schemathesis.APIOperation[Any, Any, Any, Any],
    mode: schemathesis.GenerationMode,
    base: str,
) -> None:
    # An opaque cursor can match its schema and still be unknown to the server (the
    # documented 400): "schema-valid data is accepted" does not hold for the list.
    excluded = [positive_data_acceptance] if operation.path == "/v1/videos" else []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case[Any]) -> None:
        case.call_and_validate(base_url=base, timeout=30, excluded_checks=excluded)

    check()
