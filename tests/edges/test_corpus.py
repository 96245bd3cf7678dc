"""The bad-input corpus through the whole service: real broker, Redis, Ray Serve pools, webhooks.

One service runs for the module. Every hostile upload and every invalid event of
``tests/edges/corpus.py`` is published at once, with valid videos before, between and after
them. Each case must end with its reason code: a failed status (in the store and through the
API), a signed ``video.failed`` webhook, and for invalid events a dead letter with Spring-style
headers. The service must stay healthy and the valid videos must end done.

Nothing may leave the machine: a guard in this process refuses (and records) any connection
to an address outside loopback, the service runs with ``limits.allow_private=False`` so the
fetch replicas refuse internal targets before connecting, and a loopback trap that the SSRF
cases aim at must never see a connection. The cases that need a stub resolver (a test host
name that maps to an internal address) run against ``stages.download.download`` in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from checkpoint.base import VideoState, VideoStatus
from consumers.dead_letter import DeadLetterHeaders
from consumers.events import VideoUploaded
from core import pinning
from core.config import LimitSettings
from core.errors import ReelsenseError
from devkit.receiver import WebhookReceiver
from devkit.service_run import ServiceRun
from devkit.workload import KafkaRecord, Published, read_records, upload_record
from stages.download import download
from stages.fetch import probe_video
from tests.edges.corpus import (
    EVENT_CASES,
    LIMITS,
    MEDIA_CASES,
    PUBLIC_IP,
    STUB_CASES,
    STUB_NAMES,
    Context,
    EventCase,
    MediaCase,
    StubCase,
)
from tests.stages.media import write_clip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

VALID_BEFORE, VALID_BETWEEN, VALID_AFTER = "ok-before", "ok-between", "ok-after"


# -- the guard and the trap -----------------------------------------------------------------


@dataclass
class Guard:
    """Connections attempted from this process to anything but loopback (each refused)."""

    refused: list[str] = field(default_factory=list)

    def check(self, address: Any) -> None:
        host = str(address[0]) if isinstance(address, tuple) else str(address)
        try:
            loopback = ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
        except ValueError:
            loopback = False  # a name: it would need a lookup first; refuse it too
        if not loopback:
            self.refused.append(host)
            raise PermissionError(f"test guard: connection to {host} refused")


@contextlib.contextmanager
def loopback_only() -> Iterator[Guard]:
    guard = Guard()
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
    create = socket.create_connection

    def guarded_connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            guard.check(address)
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            guard.check(address)
        return connect_ex(self, address)

    def guarded_create(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        guard.check(address)
        return create(address, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", guarded_connect)
        patch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
        patch.setattr(socket, "create_connection", guarded_create)
        yield guard


class Trap:
    """A loopback listener that only counts the connections it accepts."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> Trap:
        async def count(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self._server = await asyncio.start_server(count, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


# -- the module's service run -----------------------------------------------------------------


@dataclass
class CorpusRun:
    topic: str
    api: str
    media_ids: dict[str, str]  # case name -> video id
    events: dict[str, Published]  # case name -> where its record went
    statuses: dict[str, VideoStatus]
    dead_letters: list[KafkaRecord]
    receiver: WebhookReceiver
    guard: Guard
    trap: Trap
    after_valid: VideoStatus
    healthz_after: int
    api_dead_letters: list[dict[str, Any]]
    seconds: float

    def failed_hooks(self, video_id: str) -> list[dict[str, Any]]:
        return [
            h.payload
            for h in self.receiver.requests
            if h.verified and h.type == "video.failed" and h.video_id == video_id
        ]


@pytest.fixture(scope="module")
async def corpus(
    tmp_path_factory: pytest.TempPathFactory,
    kafka_bootstrap: str,
    redis_url: str,
    ray_session: None,
) -> AsyncIterator[CorpusRun]:
    base = tmp_path_factory.mktemp("corpus")
    unique = base.name.replace("_", "-")[-12:].strip("-") + str(time.time_ns())[-6:]
    root, outside = base / "videos", base / "outside"
    (outside / "base").mkdir(parents=True)
    valid = {
        vid: write_clip(root / "valid" / f"{vid}.mp4", 2.0)
        for vid in (VALID_BEFORE, VALID_BETWEEN, VALID_AFTER)
    }

    with loopback_only() as guard:
        trap = await Trap().start()
        run = ServiceRun(base, bootstrap=kafka_bootstrap, redis_url=redis_url, unique=unique)
        config = run.configure(limits={"file_roots": (str(root),), **LIMITS})
        assert config.limits.allow_private is False
        ctx = Context(root=root, outside=outside, trap_port=trap.port)

        media_ids = {case.name: f"bad-{case.name}" for case in MEDIA_CASES}
        records: list[KafkaRecord] = []
        names: list[str] = []
        for case in MEDIA_CASES:
            event = VideoUploaded(video_id=media_ids[case.name], uri=case.build(ctx))
            records.append(KafkaRecord(event.video_id.encode(), event.to_bytes()))
            names.append(f"media:{case.name}")
        for bad in EVENT_CASES:
            records.append(KafkaRecord(bad.key, bad.value(ctx), [("trace-id", bad.name.encode())]))
            names.append(f"event:{bad.name}")
        middle = len(records) // 2
        before = upload_record(VALID_BEFORE, valid[VALID_BEFORE])
        between = upload_record(VALID_BETWEEN, valid[VALID_BETWEEN])
        records = [before, *records[:middle], between, *records[middle:]]
        names = ["valid", *names[:middle], "valid", *names[middle:]]

        try:
            async with run:
                await run.start_in_process()
                started = time.monotonic()
                sent = await run.publish(records)
                events = {
                    name.split(":", 1)[1]: where
                    for name, where in zip(names, sent, strict=True)
                    if name.startswith("event:")
                }
                ids = [*media_ids.values(), VALID_BEFORE, VALID_BETWEEN]
                ids += [c.status_id for c in EVENT_CASES if c.status_id is not None]
                statuses = await run.wait_final(ids, timeout_s=900)
                seconds = time.monotonic() - started
                # A valid video after all of them.
                await run.upload({VALID_AFTER: valid[VALID_AFTER]})
                after = (await run.wait_final([VALID_AFTER], timeout_s=300))[VALID_AFTER]
                failed = {s.video_id for s in statuses.values() if s.status is VideoState.FAILED}
                await run.receiver.wait_for_videos(failed, event_type="video.failed", timeout_s=120)
                dead = await read_records(
                    kafka_bootstrap, config.kafka.dead_letter_topic, len(EVENT_CASES), timeout_s=60
                )
                api = f"http://127.0.0.1:{config.api.port}"
                expected = {(w.partition, w.offset) for w in events.values()}
                async with httpx.AsyncClient(base_url=api, timeout=30) as client:
                    healthz = (await client.get("/healthz")).status_code
                    # The listing reads the dead-letter topic as it stands: ask again until
                    # every dead letter published above shows (bounded), so a slow broker
                    # fetch is no miss.
                    for _ in range(20):
                        listed = await client.get("/v1/dead-letters", params={"limit": 500})
                        assert listed.status_code == 200, listed.text
                        seen = {
                            (d["data"].get("original_partition"), d["data"].get("original_offset"))
                            for d in listed.json()["items"]
                        }
                        if expected <= seen:
                            break
                        await asyncio.sleep(1.0)
                yield CorpusRun(
                    topic=config.kafka.topic,
                    api=api,
                    media_ids=media_ids,
                    events=events,
                    statuses=statuses,
                    dead_letters=dead,
                    receiver=run.receiver,
                    guard=guard,
                    trap=trap,
                    after_valid=after,
                    healthz_after=healthz,
                    api_dead_letters=listed.json()["items"],
                    seconds=seconds,
                )
        finally:
            await trap.stop()


# -- the checks -------------------------------------------------------------------------------


def _media_params() -> list[Any]:
    return [
        pytest.param(
            case,
            id=case.name,
            marks=[pytest.mark.xfail(strict=True, reason=case.known_bug)] if case.known_bug else [],
        )
        for case in MEDIA_CASES
    ]


async def _api_status(run: CorpusRun, video_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=run.api, timeout=30) as client:
        response = await client.get(f"/v1/videos/{video_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _assert_failed_webhook(run: CorpusRun, video_id: str, code: str) -> None:
    hooks = run.failed_hooks(video_id)
    assert hooks, f"no verified video.failed webhook for {video_id}"
    assert {h["data"]["error"]["code"] for h in hooks} == {code}


@pytest.mark.parametrize("case", _media_params())
async def test_bad_upload_fails_with_its_reason(corpus: CorpusRun, case: MediaCase) -> None:
    video_id = corpus.media_ids[case.name]
    status = corpus.statuses[video_id]
    assert (status.status, status.error_code) == (VideoState.FAILED, case.code), status
    assert status.error_message
    body = await _api_status(corpus, video_id)
    assert (body["status"], body["error_code"]) == ("failed", case.code)
    _assert_failed_webhook(corpus, video_id, case.code)


def _dead_letter_of(
    run: CorpusRun, case: EventCase
) -> tuple[bytes | None, bytes | None, DeadLetterHeaders, dict[str, bytes]]:
    where = run.events[case.name]
    for record in run.dead_letters:
        letter = DeadLetterHeaders.from_headers(record.headers)
        if (letter.original_partition, letter.original_offset) == (where.partition, where.offset):
            return record.key, record.value, letter, dict(record.headers)
    raise AssertionError(f"no dead letter for {case.name} at {where}")


@pytest.mark.parametrize("case", EVENT_CASES, ids=[c.name for c in EVENT_CASES])
async def test_invalid_event_is_dead_lettered_with_its_reason(
    corpus: CorpusRun, case: EventCase
) -> None:
    key, value, letter, headers = _dead_letter_of(corpus, case)
    assert letter.original_topic == corpus.topic
    assert letter.reason_code == case.code
    assert letter.exception_fqcn == "consumers.errors.InvalidEvent"
    assert letter.exception_message
    assert letter.consumer_group
    assert key == case.key
    assert headers["trace-id"] == case.name.encode()  # the record's own headers are kept
    if letter.value_dropped is None:
        assert value == case.value(Context(Path("/"), Path("/"), 0))
    # The API lists it, with the same reason and origin.
    where = corpus.events[case.name]
    [listed] = [
        d
        for d in corpus.api_dead_letters
        if (d["data"].get("original_partition"), d["data"].get("original_offset"))
        == (where.partition, where.offset)
    ]
    assert (listed["kind"], listed["code"], listed["video_id"]) == (
        "event",
        case.code,
        case.status_id,
    )
    if case.status_id is None:
        return
    status = corpus.statuses[case.status_id]
    assert (status.status, status.error_code, status.stage) == (
        VideoState.FAILED,
        case.code,
        "validate",
    )
    body = await _api_status(corpus, case.status_id)
    assert body["error_code"] == case.code
    _assert_failed_webhook(corpus, case.status_id, case.code)


def test_failures_name_the_stage_that_failed(corpus: CorpusRun) -> None:
    wrong = {
        case.name: corpus.statuses[corpus.media_ids[case.name]].stage
        for case in MEDIA_CASES
        if case.stage is not None and not case.known_bug
        if corpus.statuses[corpus.media_ids[case.name]].stage != case.stage
    }
    assert wrong == {}


def test_no_record_for_unreadable_ids(corpus: CorpusRun) -> None:
    """An id outside the safe alphabet never becomes a key in Redis, a path or a URL."""
    for case in EVENT_CASES:
        if case.status_id is None and case.key is not None:
            assert case.key.decode(errors="replace") not in corpus.statuses


def test_service_stays_healthy_and_valid_videos_finish(corpus: CorpusRun) -> None:
    for video_id in (VALID_BEFORE, VALID_BETWEEN):
        status = corpus.statuses[video_id]
        assert status.status is VideoState.DONE, status
        assert status.frames >= 2
    assert corpus.after_valid.status is VideoState.DONE, corpus.after_valid
    assert corpus.healthz_after == 200
    assert {VALID_BEFORE, VALID_BETWEEN} <= corpus.receiver.videos("video.done")
    assert all(h.verified for h in corpus.receiver.requests)
    print(f"corpus: {len(MEDIA_CASES) + len(EVENT_CASES)} cases final in {corpus.seconds:.1f} s")


def test_nothing_left_loopback(corpus: CorpusRun) -> None:
    assert corpus.guard.refused == []
    assert corpus.trap.connections == 0


# -- resolver cases, in this process ------------------------------------------------------------


class _Content(BaseHTTPRequestHandler):
    """Stands in for the allowed public host: redirects, a loop and an HLS playlist."""

    requests: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        parts = urlsplit(self.path)
        if parts.path == "/redirect":
            self._redirect(parse_qs(parts.query)["to"][0])
        elif parts.path == "/loop":
            self._redirect("/loop")
        elif parts.path == "/playlist.m3u8":
            body = b"#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\nhttp://10.0.0.1/a.ts\n"
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.apple.mpegurl")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _ToLoopback(pinning.PinnedTransport):
    """Reaches every checked (public) address on the local content server; records them."""

    def __init__(self, port: int) -> None:
        super().__init__(route=self._route)
        self.port = port
        self.hosts: list[str] = []

    def _route(self, address: pinning.IPAddress, port: int) -> tuple[str, int]:
        self.hosts.append(str(address))
        return "127.0.0.1", self.port


@pytest.fixture(scope="module")
def content_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Content)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _stub_resolver(host: str, port: int) -> list[str]:
    if host not in STUB_NAMES:
        raise AssertionError(f"unexpected lookup of {host}")
    return STUB_NAMES[host]


@pytest.mark.parametrize("case", STUB_CASES, ids=[c.name for c in STUB_CASES])
async def test_resolved_and_redirected_targets(
    tmp_path: Path, case: StubCase, content_port: int
) -> None:
    trap = await Trap().start()
    _Content.requests.clear()
    transport = _ToLoopback(content_port)
    dest = tmp_path / "download"
    policy = LimitSettings(max_bytes=10**6, max_redirects=3)
    limits = LimitSettings(**LIMITS)  # type: ignore[arg-type]
    try:
        with loopback_only() as guard:

            def fetch_and_probe() -> None:
                download(
                    case.url.format(trap=trap.port),
                    dest,
                    policy,
                    resolver=_stub_resolver,
                    transport=transport,
                )
                probe_video(dest, limits)

            with pytest.raises(ReelsenseError) as caught:
                await asyncio.to_thread(fetch_and_probe)
    finally:
        await trap.stop()
    assert caught.value.code == case.code, caught.value
    assert guard.refused == []
    assert trap.connections == 0
    # Only the allowed host (by its checked public address) was ever asked anything.
    assert set(transport.hosts) <= {PUBLIC_IP}
    assert bool(_Content.requests) is case.first_hop_served
    if case.code == "fetch_refused":
        assert not dest.exists()
