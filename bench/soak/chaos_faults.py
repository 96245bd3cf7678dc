"""The crash soak's hostile inputs and outages, and what must come of them.

- A poison re-send: the upload event of a video already done, sent again with a field the
  schema does not know. It must be dead-lettered with its reason, its offset committed, and the
  done video's record and rows left as they were.
- A slow-drip source: an HTTP server that sends its headers and then one byte every half
  second for ever. The video must fail with ``fetch_timeout`` (a visible status and a
  ``video.failed`` webhook), holding its slot no longer than the fetch deadline allows.
- An object-store outage: the S3 endpoint of the service's chunks and result documents is
  reached through a ``Gate`` that refuses every connection (and resets the open ones) for
  minutes, while the endpoint behind it keeps its data. No video may fail for it.
- A frozen consumer: a service process stopped (SIGSTOP) past its group session and its video
  leases while it holds partitions, then let go on. Its videos are taken over by the other
  process; when it wakes, nothing it does may double or lose a video.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Collection, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import psutil

from bench.soak.chaos_verify import DONE_EVENT
from checkpoint.base import CheckpointStore, VideoState
from consumers.dead_letter import REASON_CODE
from devkit.blackhole import Blackhole
from devkit.receiver import ReceivedWebhook
from devkit.service_run import ServiceRun
from devkit.services import free_port
from devkit.workload import KafkaRecord, read_records, upload_record

log = logging.getLogger("bench.soak.chaos")

FAILED_EVENT = "video.failed"


class DripSource:
    """HTTP on 127.0.0.1 that never finishes a response: headers, then a byte every ``gap_s``."""

    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: 100000000\r\n\r\n"

    def __init__(self, *, gap_s: float = 0.5) -> None:
        self.gap_s = gap_s
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}.mp4"

    def _serve(self) -> None:
        with suppress(OSError):
            while not self._stop.is_set():
                conn, _ = self._sock.accept()
                threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn, suppress(OSError):
            conn.recv(65536)
            conn.sendall(self.HEAD)
            while not self._stop.wait(self.gap_s):
                conn.sendall(b"\x00")

    def close(self) -> None:
        self._stop.set()
        with suppress(OSError):  # wakes the accept() under way (closing alone would not)
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


class Gate:
    """A TCP forwarder on 127.0.0.1 to ``target_port`` that an outage shuts: while shut,
    connections are refused and the open ones are reset, as when the endpoint is down. While it
    denies, every request is answered ``403 AccessDenied``, as S3 answers a key that is
    rotated away or a policy that no longer allows the service."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._denying = False

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", self.port)

    async def shut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def outage(self, seconds: float) -> None:
        """Shut for ``seconds``, then open again on the same port."""
        await self.shut()
        try:
            await asyncio.sleep(seconds)
        finally:
            await self.open()

    async def denial(self, seconds: float) -> None:
        """Answer AccessDenied for ``seconds`` (connections open now are reset first)."""
        for writer in list(self._open):
            writer.transport.abort()
        self._denying = True
        try:
            await asyncio.sleep(seconds)
        finally:
            self._denying = False

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._denying:
            await _deny(reader, writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for side in (writer, up_writer):
                self._open.discard(side)
                side.transport.abort()


_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)


async def _deny(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read one request's head, answer it 403 AccessDenied, close."""
    with suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        await reader.readuntil(b"\r\n\r\n")
        head = (
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_DENIED)
        )
        writer.write(head + _DENIED)
        await writer.drain()
    writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with suppress(OSError):
        writer.write_eof()


def drip_record(video_id: str, uri: str) -> KafkaRecord:
    """The upload event of a video whose source drips."""
    value = json.dumps({"video_id": video_id, "uri": uri}).encode()
    return KafkaRecord(video_id.encode(), value)


def poison_record(video_id: str, path: Path) -> KafkaRecord:
    """``video_id``'s upload event again, with one field the schema does not know."""
    good = upload_record(video_id, path)
    event = json.loads(good.value or b"{}")
    event["unexpected"] = True
    return KafkaRecord(good.key, json.dumps(event).encode())


async def pause(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT (also when this is cancelled)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


async def check_hostile(
    *,
    bootstrap: str,
    dead_letter_topic: str,
    store: CheckpointStore,
    hooks: Sequence[ReceivedWebhook],
    poisoned: Sequence[str],
    dripped: Sequence[str],
) -> dict[str, Any]:
    """Figures and failures for the hostile records: every poison re-send dead-lettered
    with its reason while its video stays done, every dripping source failed with
    ``fetch_timeout`` and announced."""
    letters = await read_records(bootstrap, dead_letter_topic, len(poisoned), timeout_s=30)
    reasons = {(r.key or b"").decode(errors="replace"): r.header(REASON_CODE) for r in letters}
    report: dict[str, Any] = {
        "poison_resends": len(poisoned),
        "dead_letters": len(letters),
        "poison_not_dead_lettered": sorted(v for v in poisoned if v not in reasons),
        "poison_reasons": sorted({reasons[v] for v in poisoned if v in reasons}),
    }
    undone = []
    for video_id in poisoned:
        status = await store.get(video_id)
        if status is None or status.status is not VideoState.DONE:
            undone.append(video_id)
    report["poisoned_videos_not_done"] = undone
    announced = {h.video_id for h in hooks if h.type == FAILED_EVENT}
    drips: dict[str, str] = {}
    for video_id in dripped:
        status = await store.get(video_id)
        drips[video_id] = "missing" if status is None else f"{status.status}:{status.error_code}"
    report["drip_outcomes"] = drips
    report["drips_not_announced"] = sorted(set(dripped) - announced)
    failures = []
    if report["poison_not_dead_lettered"]:
        failures.append("a poison re-send was not dead-lettered")
    if undone:
        failures.append("a poison re-send changed the record of a done video")
    if any(outcome != "failed:fetch_timeout" for outcome in drips.values()):
        failures.append("a dripping source did not fail with fetch_timeout")
    if report["drips_not_announced"]:
        failures.append("a dripping source's failure was not announced")
    report["failures"] = failures
    return report


def object_storage(port: int, gate: Gate, bucket: str = "objects") -> dict[str, object]:
    """The storage settings that put the service's chunks and documents in ``bucket`` on
    the S3 endpoint at 127.0.0.1:``port`` (the bucket made here), reached through ``gate``."""
    import boto3

    endpoint = f"http://127.0.0.1:{port}"
    keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys).create_bucket(
        Bucket=bucket
    )
    return {
        "object_store_uri": f"s3://{bucket}/",
        "s3_endpoint_url": f"http://127.0.0.1:{gate.port}",
        "s3_access_key_id": keys["aws_access_key_id"],
        "s3_secret_access_key": keys["aws_secret_access_key"],
    }


async def kill_replica(run: ServiceRun, deployment: str) -> bool:
    """SIGKILL one replica of ``deployment`` under service ``a`` (Serve starts a new one)."""
    for _ in range(120):
        replica = run.process("a").replica(deployment)
        if replica is not None:
            with suppress(psutil.NoSuchProcess):
                replica.kill()
                return True
        await asyncio.sleep(0.5)
    log.warning("no %s replica found to kill", deployment)
    return False


DEAD_TENANT = "acme"  # with a dead endpoint: the tenant whose callback never answers


def dead_endpoint_records(
    videos: Mapping[str, Path], dead: Blackhole, on: bool
) -> list[KafkaRecord]:
    """One upload event per video; with a dead endpoint, every other video is tenant acme's
    with ``dead`` as its callback URL (its webhooks to the run's receiver still go out, as a
    subscription), the rest tenant globex's."""
    if not on:
        return [upload_record(v, path) for v, path in videos.items()]
    records = []
    for n, (video_id, path) in enumerate(videos.items()):
        extra = {"tenant": DEAD_TENANT, "callback_url": dead.url()} if n % 2 == 0 else {}
        records.append(upload_record(video_id, path, **({"tenant": "globex"} | extra)))
    return records


async def webhook_delays(
    store: CheckpointStore, hooks: Sequence[ReceivedWebhook], ids: Collection[str]
) -> dict[str, Any]:
    """From each video's final transition to its first delivery at the run's receiver, by
    tenant: ``webhook_delay_p50_s`` / ``_p95_s`` for every tenant but the dead endpoint's (the
    figures compared with a run without it), ``dead_tenant_webhook_delay_p95_s`` for it."""
    first: dict[str, float] = {}
    for hook in hooks:
        video_id = hook.video_id
        if video_id in ids and hook.type == DONE_EVENT:
            first[video_id] = min(first.get(video_id, hook.received_at), hook.received_at)
    delays: dict[str, list[float]] = {"others": [], "dead": []}
    for video_id, at in first.items():
        status = await store.get(video_id)
        if status is None or status.finished_at is None:
            continue
        group = "dead" if status.tenant == DEAD_TENANT else "others"
        delays[group].append(max(0.0, at - status.finished_at.timestamp()))
    return {
        "webhook_delay_p50_s": _quantile(delays["others"], 0.5),
        "webhook_delay_p95_s": _quantile(delays["others"], 0.95),
        "dead_tenant_webhook_delay_p95_s": _quantile(delays["dead"], 0.95),
    }


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)
