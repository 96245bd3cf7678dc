"""The progress API over a real RedisCheckpointStore.

Plain requests go through httpx's ASGI transport; event streams need a real server (the ASGI
transport buffers whole bodies), so those tests run uvicorn on 127.0.0.1 in this event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn
from fastapi import FastAPI
from prometheus_client import Counter
from ray import cloudpickle
from ray import serve as ray_serve

from api.app import api_deployment, api_server, create_app
from api.models import DeadLetterEntry
from api.progress_hub import ProgressHub, StreamTooSlow
from api.search import SegmentSearch
from checkpoint.base import OutboxEvent, ProgressEvent, VideoState, VideoStatus
from checkpoint.redis_store import RedisCheckpointStore
from cli.main import main as cli_main
from consumers.admin import ensure_topics
from consumers.events import VideoDeleted, parse_event
from consumers.publishing import publish_deletion
from core.config import KafkaSettings
from core.records import VideoRef
from core.search import SEARCHED_KINDS, Method, SearchFilter, SegmentHit
from devkit.services import LocalProcess, free_port
from devkit.workload import read_records
from models.embedding import E5Embedder
from sinks.search import LanceSearchIndex
from tests.sinks import make_result

PIPELINE = "pv-test"
TOKENS = {"token-a": "acme", "token-b": "globex"}
A = {"authorization": "Bearer token-a"}
B = {"authorization": "Bearer token-b"}


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[RedisCheckpointStore]:
    opened = RedisCheckpointStore.from_url(redis_url, key_prefix=f"api-{unique}")
    yield opened
    await opened.close()


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://api")


async def queued(store: RedisCheckpointStore, video_id: str, tenant: str = "default") -> None:
    await store.mark_queued(VideoRef(video_id, f"file:///videos/{video_id}.mp4", tenant), PIPELINE)


async def finish(store: RedisCheckpointStore, video_id: str, epoch: int, tenant: str) -> None:
    outbox = OutboxEvent(
        type="video.done",
        video_id=video_id,
        tenant=tenant,
        pipeline_version=PIPELINE,
        timestamp=datetime.now(UTC),
    )
    await store.mark_done(video_id, epoch, frames=3, timings={"ocr": 0.5}, outbox=outbox)


async def done(store: RedisCheckpointStore, video_id: str, tenant: str = "default") -> None:
    claim = await store.claim(VideoRef(video_id, f"file:///v/{video_id}.mp4", tenant), PIPELINE)
    await store.advance(video_id, claim.epoch, "ocr", 1, 1)
    await finish(store, video_id, claim.epoch, tenant)


# -- reads --------------------------------------------------------------------------------


async def test_get_video_returns_its_status(store: RedisCheckpointStore) -> None:
    await done(store, "clip-1", tenant="acme")
    async with client_for(create_app(store, tokens={})) as client:
        response = await client.get("/v1/videos/clip-1")
    assert response.status_code == 200
    status = VideoStatus.model_validate(response.json())
    assert (status.video_id, status.tenant, status.status) == ("clip-1", "acme", VideoState.DONE)
    assert status.frames == 3
    assert status.stages["ocr"].done == 1


async def test_unknown_video_is_a_json_404(store: RedisCheckpointStore) -> None:
    async with client_for(create_app(store, tokens={})) as client:
        response = await client.get("/v1/videos/nothing-here")
        unknown_route = await client.get("/v2/elsewhere")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "nothing-here" in response.json()["error"]["message"]
    assert unknown_route.status_code == 404
    assert unknown_route.json()["error"]["code"] == "not_found"


async def test_list_pages_through_every_video_once(store: RedisCheckpointStore) -> None:
    ids = [f"v{i}" for i in range(7)]
    for video_id in ids:
        await queued(store, video_id)
    seen: list[str] = []
    async with client_for(create_app(store, tokens={})) as client:
        cursor: str | None = None
        while True:
            params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
            response = await client.get("/v1/videos", params=params)
            assert response.status_code == 200
            page = response.json()
            assert len(page["items"]) <= 3
            seen += [item["video_id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    assert seen == list(reversed(ids))  # newest first


async def test_list_filters_by_status_and_tenant(store: RedisCheckpointStore) -> None:
    await queued(store, "q-acme", "acme")
    await queued(store, "q-globex", "globex")
    await done(store, "d-acme", "acme")
    async with client_for(create_app(store, tokens={})) as client:
        by_status = await client.get("/v1/videos", params={"status": "done"})
        by_tenant = await client.get("/v1/videos", params={"tenant": "acme"})
        both = await client.get("/v1/videos", params={"tenant": "acme", "status": "queued"})
    assert [v["video_id"] for v in by_status.json()["items"]] == ["d-acme"]
    assert {v["video_id"] for v in by_tenant.json()["items"]} == {"q-acme", "d-acme"}
    assert [v["video_id"] for v in both.json()["items"]] == ["q-acme"]


async def test_bad_list_parameters_are_json_errors(store: RedisCheckpointStore) -> None:
    async with client_for(create_app(store, tokens={}, max_page=10)) as client:
        bad_status = await client.get("/v1/videos", params={"status": "sleeping"})
        too_many = await client.get("/v1/videos", params={"limit": 11})
        bad_cursor = await client.get("/v1/videos", params={"cursor": "%%%not-a-cursor"})
    assert bad_status.status_code == 422
    assert bad_status.json()["error"]["code"] == "invalid_request"
    assert "status" in bad_status.json()["error"]["message"]
    assert too_many.status_code == 422
    assert bad_cursor.status_code == 400
    assert bad_cursor.json()["error"]["code"] == "invalid_cursor"


# -- authentication and tenants -----------------------------------------------------------


async def test_missing_or_invalid_token_is_401(store: RedisCheckpointStore) -> None:
    await queued(store, "secret-clip", "acme")
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        missing = await client.get("/v1/videos/secret-clip")
        invalid = await client.get(
            "/v1/videos/secret-clip", headers={"authorization": "Bearer nope"}
        )
        wrong_scheme = await client.get(
            "/v1/videos", headers={"authorization": "Basic dG9rZW4tYTo="}
        )
        listing = await client.get("/v1/videos")
        health = await client.get("/healthz")
    for response in (missing, invalid, wrong_scheme, listing):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert health.status_code == 200  # probes carry no token


async def test_a_tenant_sees_only_its_own_videos(store: RedisCheckpointStore) -> None:
    await queued(store, "a-1", "acme")
    await queued(store, "a-2", "acme")
    await queued(store, "b-1", "globex")
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        own = await client.get("/v1/videos/a-1", headers=A)
        other = await client.get("/v1/videos/b-1", headers=A)
        listing = await client.get("/v1/videos", headers=A)
        other_listing = await client.get("/v1/videos", params={"tenant": "globex"}, headers=A)
        b_listing = await client.get("/v1/videos", headers=B)
    assert own.status_code == 200
    # Another tenant's video looks exactly like one that does not exist.
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "not_found"
    assert {v["video_id"] for v in listing.json()["items"]} == {"a-1", "a-2"}
    assert other_listing.status_code == 403
    assert other_listing.json()["error"]["code"] == "tenant_forbidden"
    assert [v["video_id"] for v in b_listing.json()["items"]] == ["b-1"]


# -- search -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def search_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanceSearchIndex]:
    """The real search index (multilingual E5, full text) over four videos of two tenants."""
    index = LanceSearchIndex(str(tmp_path_factory.mktemp("search")), E5Embedder())
    index.open()
    texts = {
        ("menu", "acme"): ["BREAKFAST MENU coffee and toast"] * 3 + ["OPEN MONDAY TO FRIDAY"] * 3,
        ("ad", "acme"): ["FRESH COFFEE EVERY MORNING"] * 4,
        ("sign", "acme"): ["欢迎光临"] * 4,
        ("rival", "globex"): ["COFFEE COFFEE COFFEE SALE"] * 4,
    }
    index.write(
        [
            make_result(video_id, frames=len(lines), texts=lines, tenant=tenant, embed=False)
            for (video_id, tenant), lines in texts.items()
        ]
    )
    index.refresh()
    yield index
    index.close()


class Recorded:
    """The real search, with the calls it got."""

    def __init__(self, index: LanceSearchIndex) -> None:
        self.calls: list[tuple[str, int, SearchFilter, str]] = []
        self._search = SegmentSearch.over(index)

    async def __call__(
        self, query: str, k: int, where: SearchFilter, method: Method
    ) -> list[SegmentHit]:
        self.calls.append((query, k, where, method))
        return await self._search(query, k, where, method)


async def test_search_returns_places_best_first(
    store: RedisCheckpointStore, search_index: LanceSearchIndex
) -> None:
    search = Recorded(search_index)
    async with client_for(create_app(store, tokens={}, search=search)) as client:
        response = await client.get("/v1/search", params={"q": "coffee", "k": 3})
        welcome = await client.get("/v1/search", params={"q": "welcome", "k": 1})
        text = await client.get(
            "/v1/search", params={"q": "coffee", "method": "text", "kind": "text"}
        )
    assert response.status_code == 200
    body = response.json()
    assert (body["query"], body["method"]) == ("coffee", "hybrid")
    assert {h["video_id"] for h in body["hits"]} == {"rival", "ad", "menu"}
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    first = body["hits"][0]
    assert first["kinds"] == ["text"]
    assert first["thumbnail"] is None  # the results have no thumbnails
    assert first["partial"] is False
    assert [h["text"] for h in welcome.json()["hits"]] == ["欢迎光临"]
    assert {h["video_id"] for h in text.json()["hits"]} == {"rival", "ad", "menu"}
    assert search.calls[0] == ("coffee", 3, SearchFilter(), "hybrid")
    assert search.calls[2] == ("coffee", 10, SearchFilter(kinds=("text",)), "text")


async def test_the_search_takes_the_kinds_the_pipelines_video_stages_make_searchable(
    store: RedisCheckpointStore, search_index: LanceSearchIndex
) -> None:
    search = Recorded(search_index)
    app = create_app(store, tokens={}, search=search, search_kinds=[*SEARCHED_KINDS, "chapter"])
    async with client_for(app) as client:
        schema = (await client.get("/openapi.json")).json()
        taken = await client.get("/v1/search", params={"q": "open", "kind": "chapter"})
        refused = await client.get("/v1/search", params={"q": "open", "kind": "colour_run"})
    (kind,) = [p for p in schema["paths"]["/v1/search"]["get"]["parameters"] if p["name"] == "kind"]
    assert kind["schema"]["anyOf"][0]["items"]["enum"] == [*SEARCHED_KINDS, "chapter"]
    assert taken.status_code == 200
    assert search.calls == [("open", 10, SearchFilter(kinds=("chapter",)), "hybrid")]
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "invalid_request"


async def test_search_filters_reach_the_index(
    store: RedisCheckpointStore, search_index: LanceSearchIndex
) -> None:
    search = Recorded(search_index)
    params = {"q": "open", "video": "menu", "from_s": 1.6, "to_s": 9.0, "kind": "text"}
    async with client_for(create_app(store, tokens={}, search=search)) as client:
        response = await client.get("/v1/search", params=params)
        unknown = await client.get("/v1/search", params={"q": "open", "kind": "logo"})
        backwards = await client.get("/v1/search", params={"q": "open", "from_s": 5, "to_s": 1})
        negative = await client.get("/v1/search", params={"q": "open", "from_s": -1})
        method = await client.get("/v1/search", params={"q": "open", "method": "best"})
    hits = response.json()["hits"]
    assert [(h["video_id"], h["start_s"], h["text"]) for h in hits] == [
        ("menu", 1.5, "OPEN MONDAY TO FRIDAY")
    ]
    assert search.calls[0] == (
        "open",
        10,
        SearchFilter(None, "menu", ("text",), 1.6, 9.0),
        "hybrid",
    )
    assert len(search.calls) == 2  # refused requests never reach the index
    assert backwards.json()["hits"] == []  # no place ends after 5 s and starts before 1 s
    for refused in (unknown, negative, method):
        assert refused.status_code == 422
        assert refused.json()["error"]["code"] == "invalid_request"


async def test_search_is_scoped_to_the_token_tenant(
    store: RedisCheckpointStore, search_index: LanceSearchIndex
) -> None:
    search = Recorded(search_index)
    async with client_for(create_app(store, tokens=TOKENS, search=search)) as client:
        response = await client.get("/v1/search", params={"q": "coffee"}, headers=A)
        other = await client.get(
            "/v1/search", params={"q": "coffee", "tenant": "globex"}, headers=A
        )
        text = await client.get("/v1/search", params={"q": "sale", "method": "text"}, headers=A)
    assert {h["tenant"] for h in response.json()["hits"]} == {"acme"}
    assert text.json()["hits"] == []  # only globex's video says SALE
    assert search.calls[0] == ("coffee", 10, SearchFilter(tenant="acme"), "hybrid")
    assert other.status_code == 403


async def test_search_drops_hits_of_other_tenants(store: RedisCheckpointStore) -> None:
    async def careless(query: str, k: int, where: SearchFilter, method: Method) -> list[SegmentHit]:
        return [SegmentHit("rival", "globex", 0.0, 1.0, "coffee", ("text",), 0.1)]

    async with client_for(create_app(store, tokens=TOKENS, search=careless)) as client:
        response = await client.get("/v1/search", params={"q": "coffee"}, headers=A)
    assert response.json()["hits"] == []


async def test_empty_query_is_422_and_missing_search_is_503(
    store: RedisCheckpointStore, search_index: LanceSearchIndex
) -> None:
    search = Recorded(search_index)
    async with client_for(create_app(store, tokens={}, search=search)) as client:
        empty = await client.get("/v1/search", params={"q": ""})
        blank = await client.get("/v1/search", params={"q": "   "})
        absent = await client.get("/v1/search")
    async with client_for(create_app(store, tokens={})) as client:
        unconfigured = await client.get("/v1/search", params={"q": "coffee"})
    for response in (empty, blank, absent):
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_request"
    assert search.calls == []
    assert unconfigured.status_code == 503
    assert unconfigured.json()["error"]["code"] == "search_unavailable"


async def test_cli_search_prints_a_table_and_json(
    store: RedisCheckpointStore,
    search_index: LanceSearchIndex,
    capsys: pytest.CaptureFixture[str],
) -> None:
    search = SegmentSearch.over(search_index)
    port = free_port()
    server = api_server(create_app(store, tokens=TOKENS, search=search), "127.0.0.1", port)
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.02)
    api = ["--api", f"http://127.0.0.1:{port}", "--token", "token-a"]

    async def printed(*argv: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(cli_main, ["search", *argv, *api])
        out, err = capsys.readouterr()
        return code, out, err

    try:
        code, table, _ = await printed("welcome", "-k", "2")
        _, as_json, _ = await printed("coffee", "--json", "--kind", "text", "--method", "text")
        _, filtered, _ = await printed("open", "--video", "menu", "--from", "1.6")
        refused = await printed("coffee", "--tenant", "globex")
    finally:
        server.should_exit = True
        await serving
    assert code == 0
    assert "'welcome' (hybrid): 2 places" in table
    first_row = next(line for line in table.splitlines() if "欢迎光临" in line)
    assert "sign" in first_row
    assert "0:00.0–0:02.0" in first_row
    body = json.loads(as_json)
    assert body["method"] == "text"
    assert {h["video_id"] for h in body["hits"]} == {"menu", "ad"}  # acme's, not globex's
    assert "OPEN MONDAY TO FRIDAY" in filtered
    assert "BREAKFAST" not in filtered
    assert refused[0] == 1
    assert "403: tenant_forbidden" in refused[2]


# -- dead letters -------------------------------------------------------------------------


async def test_dead_letters_are_listed_per_tenant(store: RedisCheckpointStore) -> None:
    letters = [
        DeadLetterEntry(
            id="videos.uploaded.dlq/0/7", kind="event", tenant="acme", code="event_invalid"
        ),
        DeadLetterEntry(id="msg_1", kind="webhook", tenant="globex", code="webhook_gone"),
    ]
    asked: list[tuple[str | None, int]] = []

    async def newest(tenant: str | None, limit: int) -> list[DeadLetterEntry]:
        asked.append((tenant, limit))
        return [d for d in letters if tenant is None or d.tenant == tenant][:limit]

    async with client_for(create_app(store, tokens=TOKENS, dead_letters=newest)) as client:
        response = await client.get("/v1/dead-letters", params={"limit": 5}, headers=A)
    async with client_for(create_app(store, tokens={})) as client:
        unconfigured = await client.get("/v1/dead-letters")
    assert [d["id"] for d in response.json()["items"]] == ["videos.uploaded.dlq/0/7"]
    assert asked == [("acme", 5)]
    assert unconfigured.status_code == 503


# -- health, metrics, schema --------------------------------------------------------------


async def test_healthz_is_ok_while_redis_answers(store: RedisCheckpointStore) -> None:
    async with client_for(create_app(store, tokens={})) as client:
        response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_healthz_is_503_when_redis_is_down(unique: str) -> None:
    closed = free_port()  # nothing listens there
    down = RedisCheckpointStore.from_url(f"redis://127.0.0.1:{closed}/0", key_prefix=unique)
    try:
        async with client_for(create_app(down, tokens={}, health_timeout_s=10)) as client:
            health = await client.get("/healthz")
            read = await client.get("/v1/videos/anything")
    finally:
        await down.close()
    assert health.status_code == 503
    assert health.json()["error"]["code"] == "store_unavailable"
    # Other reads say the same thing: retry later, and when.
    assert read.status_code == 503
    assert read.json()["error"]["code"] == "checkpoint_unavailable"
    assert "retry-after" in read.headers


async def test_metrics_expose_the_default_registry(
    store: RedisCheckpointStore, unique: str
) -> None:
    elsewhere = Counter(f"reelsense_test_{unique}_total", "Registered by other code.")
    elsewhere.inc(3)
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        await client.get("/v1/videos", headers=A)
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert f"reelsense_test_{unique}_total 3.0" in response.text
    assert 'route="/v1/videos"' in response.text


async def test_openapi_names_the_models(store: RedisCheckpointStore) -> None:
    async with client_for(create_app(store, tokens={})) as client:
        schema = (await client.get("/openapi.json")).json()
        docs = await client.get("/docs")
    get_video = schema["paths"]["/v1/videos/{video_id}"]["get"]["responses"]
    assert get_video["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/VideoStatus"
    }
    assert get_video["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"
    }
    stream = schema["paths"]["/v1/videos/{video_id}/events"]["get"]["responses"]
    item = stream["200"]["content"]["text/event-stream"]["itemSchema"]
    refs = {entry["$ref"] for entry in item["properties"]["data"]["contentSchema"]["oneOf"]}
    components = schema["components"]["schemas"]
    assert {ref.rsplit("/", 1)[1] for ref in refs} <= set(components)
    assert "ProgressUpdate" in components
    assert set(components["VideoStatus"]["properties"]) >= set(VideoStatus.model_fields)
    assert docs.status_code == 200


# -- live event streams (a real server) ---------------------------------------------------


@dataclass
class Event:
    event: str | None
    data: dict | None  # type: ignore[type-arg]
    comment: str | None = None


async def read_events(response: httpx.Response) -> AsyncIterator[Event]:
    """Server-sent events, comments included, as they arrive."""
    name: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield Event(None, None, comment=line[1:].strip())
        elif line.startswith("event:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            data.append(line.split(":", 1)[1].strip())
        elif line == "" and (name or data):
            yield Event(name, json.loads("\n".join(data)) if data else None)
            name, data = None, []


class EventReader:
    """Reads a stream in a task, so a test can wait for the next event with a timeout
    without cancelling the read itself."""

    def __init__(self, response: httpx.Response) -> None:
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._task = asyncio.create_task(self._read(response))

    async def _read(self, response: httpx.Response) -> None:
        async for event in read_events(response):
            await self._queue.put(event)
        await self._queue.put(None)

    async def next(self, wait_s: float = 30.0, *, comments: bool = False) -> Event | None:
        """The next event (None once the stream has ended); TimeoutError if none came."""
        while True:
            event = await asyncio.wait_for(self._queue.get(), wait_s)
            if event is None or comments or event.comment is None:
                return event

    async def rest(self) -> list[Event]:
        """Every event up to the end of the stream."""
        events: list[Event] = []
        while (event := await self.next()) is not None:
            events.append(event)
        return events

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[FastAPI], Awaitable[str]]]:
    """Starts uvicorn on a free port for an app; stops it after the test."""
    servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(app: FastAPI) -> str:
        port = free_port()
        server = api_server(app, "127.0.0.1", port)
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        servers.append((server, task))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, task in servers:
        server.should_exit = True
        await task


Serve = Callable[[FastAPI], Awaitable[str]]


async def progress_until_seen(
    store: RedisCheckpointStore, reader: EventReader, video_id: str, epoch: int
) -> tuple[int, Event]:
    """The subscription behind a stream takes hold a moment after the stream opens: advance
    the video until one of its progress events arrives. Returns the chunks done and the event."""
    for chunk in range(1, 200):
        await store.advance(video_id, epoch, "ocr", chunk)
        with contextlib.suppress(TimeoutError):
            event = await reader.next(0.3)
            if event is not None and event.event == "progress":
                return chunk, event
    raise AssertionError(f"no progress event of {video_id} arrived")


async def test_video_stream_follows_progress_to_done(
    store: RedisCheckpointStore, serve: Serve
) -> None:
    ref = VideoRef("streamed", "file:///v/streamed.mp4", "acme")
    await store.mark_queued(ref, PIPELINE)
    # A long heartbeat: the stream must end on the done event, not on the re-read at a beat.
    base = await serve(create_app(store, tokens=TOKENS, heartbeat_s=300))
    async with (
        httpx.AsyncClient(base_url=base, headers=A, timeout=30) as client,
        client.stream("GET", "/v1/videos/streamed/events") as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = EventReader(response)
        first = await reader.next()
        assert first is not None
        assert first.data is not None
        assert (first.event, first.data["status"]) == ("status", "queued")
        claim = await store.claim(ref, PIPELINE)
        chunks, seen = await progress_until_seen(store, reader, "streamed", claim.epoch)
        await store.advance("streamed", claim.epoch, "ocr", chunks + 1, chunks + 1)
        await finish(store, "streamed", claim.epoch, "acme")
        received = [seen, *await reader.rest()]  # the stream ends by itself
        await reader.close()
    data = [e.data for e in received if e.data is not None]
    assert [(e.event, d["status"]) for e, d in zip(received, data, strict=True)][-2:] == [
        ("progress", "done"),
        ("status", "done"),
    ]
    progress = [d for e, d in zip(received, data, strict=True) if e.event == "progress"]
    assert {p["video_id"] for p in progress} == {"streamed"}
    assert {"stage": "ocr", "done": chunks + 1, "total": chunks + 1}.items() <= next(
        p for p in progress if p["done"] == chunks + 1
    ).items()
    assert data[-1]["frames"] == 3


async def test_stream_of_a_finished_video_ends_at_once(
    store: RedisCheckpointStore, serve: Serve
) -> None:
    await done(store, "old", "acme")
    base = await serve(create_app(store, tokens={}))
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        async with client.stream("GET", "/v1/videos/old/events") as response:
            reader = EventReader(response)
            events = await reader.rest()
            await reader.close()
        missing = await client.get("/v1/videos/never/events")
    assert [(e.event, (e.data or {}).get("status")) for e in events] == [("status", "done")]
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


async def test_a_tenant_deletes_its_own_video_through_the_upload_topic(
    store: RedisCheckpointStore, kafka_bootstrap: str, unique: str
) -> None:
    """``DELETE /v1/videos/{id}`` publishes a ``video.deleted`` event under the video's key
    (in order with its uploads) and answers 202; another tenant's video is a 404 like a
    missing one, and an API without a way to delete answers 503."""
    kafka = KafkaSettings(bootstrap=kafka_bootstrap, topic=f"uploads-{unique}")
    await ensure_topics(kafka_bootstrap, {kafka.topic: 1})
    await done(store, "mine", tenant="acme")
    app = create_app(store, tokens=TOKENS, delete=functools.partial(publish_deletion, kafka))
    async with client_for(app) as client:
        theirs = await client.delete("/v1/videos/mine", headers=B)
        accepted = await client.delete("/v1/videos/mine", headers=A)
    async with client_for(create_app(store, tokens=TOKENS)) as client:
        unavailable = await client.delete("/v1/videos/mine", headers=A)
    assert theirs.status_code == 404
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["video_id"] == "mine"
    assert unavailable.status_code == 503
    [record] = await read_records(kafka_bootstrap, kafka.topic, 1)
    event = parse_event(record.key, record.value, max_bytes=65536)
    assert isinstance(event, VideoDeleted)
    assert (record.key, event.video_id, event.tenant) == (b"mine", "mine", "acme")


SIGNED = (
    "https://uploader:hunter2@media.example/v/leak.mp4?X-Amz-Signature=abc123&X-Amz-Credential=AKIA"
)


async def test_statuses_show_the_source_without_its_secrets(
    store: RedisCheckpointStore, serve: Serve
) -> None:
    """A presigned or password-carrying source URI is shown as the result shows it, in a
    video's status, a page of videos and the stream's status events: no userinfo, no query."""
    ref = VideoRef("leak", SIGNED, "acme")
    claim = await store.claim(ref, PIPELINE)
    await finish(store, "leak", claim.epoch, "acme")
    base = await serve(create_app(store, tokens={}))
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        one = await client.get("/v1/videos/leak")
        page = await client.get("/v1/videos")
        async with client.stream("GET", "/v1/videos/leak/events") as response:
            reader = EventReader(response)
            events = await reader.rest()
            await reader.close()
    shown = "https://***@media.example/v/leak.mp4?***"
    assert one.json()["uri"] == shown
    assert [item["uri"] for item in page.json()["items"]] == [shown]
    assert [(e.data or {}).get("uri") for e in events] == [shown]
    for body in (one.text, page.text, json.dumps([e.data for e in events])):
        assert "hunter2" not in body
        assert "abc123" not in body
        assert "AKIA" not in body
    raw = await store.get("leak")
    assert raw is not None
    assert raw.uri == SIGNED  # the service itself still reads the source it was given


async def test_event_stream_shows_only_the_callers_tenant(
    store: RedisCheckpointStore, serve: Serve
) -> None:
    mine = VideoRef("mine", "file:///v/mine.mp4", "acme")
    theirs = VideoRef("theirs", "file:///v/theirs.mp4", "globex")
    base = await serve(create_app(store, tokens=TOKENS))
    async with (
        httpx.AsyncClient(base_url=base, headers=A, timeout=30) as client,
        client.stream("GET", "/v1/events") as response,
    ):
        assert response.status_code == 200
        reader = EventReader(response)
        mine_epoch = (await store.claim(mine, PIPELINE)).epoch
        theirs_epoch = (await store.claim(theirs, PIPELINE)).epoch
        chunk, first = await progress_until_seen(store, reader, "mine", mine_epoch)
        # The subscription is live now. Theirs is published before mine on the same channel,
        # so had it passed the filter it would arrive before mine.
        await store.advance("theirs", theirs_epoch, "ocr", 1)
        await store.advance("mine", mine_epoch, "ocr", chunk + 1)
        seen = [first]
        while (seen[-1].data or {}).get("done") != chunk + 1:
            event = await reader.next()
            assert event is not None
            seen.append(event)
        await reader.close()
    assert {(e.data or {}).get("video_id") for e in seen} == {"mine"}
    assert {e.event for e in seen} == {"progress"}


async def test_idle_stream_sends_heartbeats(store: RedisCheckpointStore, serve: Serve) -> None:
    base = await serve(create_app(store, tokens={}, heartbeat_s=0.1))
    async with (
        httpx.AsyncClient(base_url=base, timeout=30) as client,
        client.stream("GET", "/v1/events") as response,
    ):
        reader = EventReader(response)
        comments = [(await reader.next(comments=True)) for _ in range(2)]
        await reader.close()
    assert [c.comment for c in comments if c is not None] == ["heartbeat", "heartbeat"]


async def test_stream_reports_a_store_that_goes_away(unique: str, serve: Serve) -> None:
    """The stream's subscription fails when Redis is unreachable: an `error` event ends it."""
    closed = free_port()
    down = RedisCheckpointStore.from_url(f"redis://127.0.0.1:{closed}/0", key_prefix=unique)
    base = await serve(create_app(down, tokens={}))
    try:
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as client,
            client.stream("GET", "/v1/events") as response,
        ):
            reader = EventReader(response)
            events = await reader.rest()
            await reader.close()
    finally:
        await down.close()
    assert [e.event for e in events] == ["error"]
    assert (events[0].data or {}).get("code") == "checkpoint_unavailable"


async def test_a_stream_whose_store_hangs_ends_instead_of_going_silent(
    redis_process: LocalProcess, unique: str, serve: Serve
) -> None:
    """Redis stops answering without closing the connection (SIGSTOP: the connection stays
    open, nothing comes back): the subscription's unanswered ping ends the stream with an
    `error` event rather than leaving it quiet for ever."""
    url = f"redis://127.0.0.1:{redis_process.port}/0"
    hung = RedisCheckpointStore.from_url(url, key_prefix=unique, progress_health_s=0.5)
    base = await serve(create_app(hung, tokens={}, heartbeat_s=300))
    assert redis_process.pid is not None
    try:
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as client,
            client.stream("GET", "/v1/events") as response,
        ):
            reader = EventReader(response)
            await asyncio.sleep(1.5)  # quiet but healthy: pinged, answered, still open
            os.kill(redis_process.pid, signal.SIGSTOP)
            events = await reader.rest()
            await reader.close()
    finally:
        os.kill(redis_process.pid, signal.SIGCONT)
        await hung.close()
    assert [e.event for e in events] == ["error"]
    assert (events[0].data or {}).get("code") == "checkpoint_unavailable"


# -- Ray Serve ------------------------------------------------------------------------------


def build_app_in_replica(redis_url: str, key_prefix: str) -> FastAPI:
    """Runs inside the Serve replica: the store is created there."""
    store = RedisCheckpointStore.from_url(redis_url, key_prefix=key_prefix)
    return create_app(store, tokens=TOKENS, owns_store=True)


async def test_api_runs_as_a_ray_serve_ingress(
    ray_session: None, store: RedisCheckpointStore, redis_url: str, unique: str
) -> None:
    # Replicas cannot import the tests package; ship this module's functions by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    await queued(store, "served", "acme")
    port = free_port()
    ray_serve.start(http_options={"host": "127.0.0.1", "port": port})
    name = f"api-{unique}"
    try:
        builder = functools.partial(build_app_in_replica, redis_url, f"api-{unique}")
        deployment = api_deployment(builder, num_cpus=0.05)
        await asyncio.to_thread(ray_serve.run, deployment.bind(), name=name, route_prefix="/")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            health = await client.get("/healthz")
            video = await client.get("/v1/videos/served", headers=A)
            hidden = await client.get("/v1/videos/served", headers=B)
    finally:
        await asyncio.to_thread(ray_serve.shutdown)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert health.status_code == 200
    assert video.json()["video_id"] == "served"
    assert hidden.status_code == 404


async def test_a_closed_stream_releases_its_subscription(
    store: RedisCheckpointStore, serve: Serve, redis_url: str, unique: str
) -> None:
    channel = f"api-{unique}:progress"  # the store's progress channel (see its key layout)
    probe = aioredis.Redis.from_url(redis_url)

    async def subscribers() -> int:
        counts = await probe.pubsub_numsub(channel)
        return int(counts[0][1])

    base = await serve(create_app(store, tokens={}, heartbeat_s=0.05))
    try:
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as client,
            client.stream("GET", "/v1/events") as response,
        ):
            reader = EventReader(response)
            await reader.next(comments=True)  # the stream runs
            for _ in range(200):
                if await subscribers() == 1:
                    break
                await asyncio.sleep(0.05)
            assert await subscribers() == 1
            await reader.close()
        # The client went away: the server notices at its next write and lets go.
        for _ in range(200):
            if await subscribers() == 0:
                break
            await asyncio.sleep(0.05)
        assert await subscribers() == 0
    finally:
        await probe.aclose()


async def test_streams_share_one_subscription_and_are_bounded(
    store: RedisCheckpointStore, serve: Serve, redis_url: str, unique: str
) -> None:
    """Three streams, one Redis subscription; a tenant's third stream and the server's fourth
    are refused with 429."""
    channel = f"api-{unique}:progress"
    probe = aioredis.Redis.from_url(redis_url)
    await queued(store, "theirs", "globex")
    app = create_app(
        store, tokens=TOKENS, heartbeat_s=0.05, max_streams=3, max_streams_per_tenant=2
    )
    base = await serve(app)
    try:
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as client,
            contextlib.AsyncExitStack() as streams,
        ):
            readers = []
            for headers in (A, A, B):
                response = await streams.enter_async_context(
                    client.stream("GET", "/v1/events", headers=headers)
                )
                assert response.status_code == 200
                readers.append(EventReader(response))
                await readers[-1].next(comments=True)  # the stream runs
            over_tenant = await client.get("/v1/events", headers=A)
            over_server = await client.get("/v1/videos/theirs/events", headers=B)
            counts = await probe.pubsub_numsub(channel)
            for reader in readers:
                await reader.close()
    finally:
        await probe.aclose()
    assert int(counts[0][1]) == 1
    for refused in (over_tenant, over_server):
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "too_many_streams"


async def test_a_client_that_does_not_read_is_cut_off_alone(store: RedisCheckpointStore) -> None:
    hub = ProgressHub(store, queue_size=3)
    ref = VideoRef("slow", "file:///v/slow.mp4", "acme")
    async with (
        hub.listen(lambda e: True, tenant=None) as unread,
        hub.listen(lambda e: True, tenant=None) as read,
    ):
        epoch = (await store.claim(ref, PIPELINE)).epoch
        seen: list[int] = []
        for chunk in range(1, 400):  # until the unread queue overflowed, however slow the pump
            await store.advance("slow", epoch, "ocr", chunk)
            while not read.empty():
                item = read.get_nowait()
                assert isinstance(item, ProgressEvent), item
                seen.append(item.done)
            if unread.qsize() == 1 and len(seen) >= 5:
                break
            await asyncio.sleep(0.05)
        [ended] = [unread.get_nowait()]
        assert isinstance(ended, StreamTooSlow)
        assert ended.code == "stream_too_slow"
        assert hub.open_streams == 1  # the reader that keeps up goes on
        assert seen == sorted(seen)
        assert len(seen) >= 5
