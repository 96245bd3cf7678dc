"""The operator side of the CLI: publish events and read the progress API."""

from __future__ import annotations

import argparse
import asyncio
import json
import mimetypes
import re
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from checkpoint.base import VideoStatus
from consumers.events import VideoUploaded
from core.config import KafkaSettings, ServiceConfig, StorageSettings
from devkit.progress_view import is_final, progress_table
from devkit.result_view import (
    clock,
    frames_table,
    outputs_table,
    result_table,
    shots_table,
    stage_lines,
    transcript,
)
from devkit.stack import read_state
from storage.errors import StoreRejected, StoreUnavailable
from storage.uri import object_store_from_uri

console = Console()


def endpoint(args: argparse.Namespace, name: str) -> str:
    """``--api`` or ``--bootstrap`` as given, else the running dev stack's."""
    given: str | None = getattr(args, name, None)
    if given:
        return given
    state = read_state(args.workdir)
    if state is None:
        if name == "bootstrap":
            return KafkaSettings().bootstrap
        raise SystemExit(f"no --{name} given and no `reelsense dev` running under {args.workdir}")
    return state[name]


def _headers(args: argparse.Namespace) -> dict[str, str]:
    return {"authorization": f"Bearer {args.token}"} if args.token else {}


class SubmitFailed(Exception):
    """Nothing was published, for this reason; ``exit_code`` 2: the command line or the file
    is wrong, 1: a service (the object store, the broker) failed."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def client_config(args: argparse.Namespace) -> ServiceConfig:
    """``--config`` (or the environment alone), with the endpoint this machine reaches."""
    overrides = {"storage": {"s3_endpoint_url": args.s3_endpoint}} if args.s3_endpoint else {}
    try:
        return ServiceConfig.load(args.config, **overrides)
    except (OSError, ValueError, ValidationError) as exc:
        raise SubmitFailed(f"cannot load {args.config or 'the settings'}: {exc}", 2) from exc


def _key_part(text: str) -> str:
    """``text`` as one safe key segment: it ends up in a URI the service parses (no spaces,
    ``#`` or ``?``), and never ``.`` or ``..``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "video"


def upload(source: str, video_id: str, tenant: str, storage: StorageSettings) -> str:
    """The local file ``source`` into the object store at ``uploads/<tenant>/<video_id>/<name>``
    (a folder per tenant, as ``limits.s3_sources`` may allow with ``{tenant}``); its URI. One
    key per video id: submitting the same id again replaces the object."""
    path = Path(source)
    if "://" in source:
        raise SubmitFailed(f"--upload takes a local file, not {source!r}", 2)
    if not path.is_file():
        raise SubmitFailed(f"{source}: no such file", 2)
    key = f"uploads/{_key_part(tenant)}/{_key_part(video_id)}/{_key_part(path.name)}"
    try:
        store = object_store_from_uri(storage.object_store_uri, storage)
        try:
            store.put_file(key, path, content_type=mimetypes.guess_type(path.name)[0])
            return store.uri(key)
        finally:
            store.close()
    except (StoreUnavailable, StoreRejected) as exc:
        raise SubmitFailed(f"cannot upload to {storage.object_store_uri}: {exc}", 1) from exc
    except OSError as exc:
        raise SubmitFailed(f"cannot read {source}: {exc}", 2) from exc


async def submit(args: argparse.Namespace) -> str:
    """Publish the upload event of ``args.source`` (put in the object store first with
    ``--upload``); its video id. ``SubmitFailed`` when nothing was published."""
    source: str = args.source
    config = client_config(args)
    video_id = args.video_id or f"{_key_part(Path(source).stem)[:40]}-{uuid.uuid4().hex[:8]}"
    uri = source if "://" in source else Path(source).resolve().as_uri()  # noqa: ASYNC240
    try:  # a bad id, tenant or callback is refused before anything is uploaded
        event = VideoUploaded(
            video_id=video_id, uri=uri, tenant=args.tenant, callback_url=args.callback_url
        )
    except ValidationError as exc:
        raise SubmitFailed(f"not a valid event: {exc}", 2) from exc
    if args.upload:
        uploaded = await asyncio.to_thread(upload, source, video_id, event.tenant, config.storage)
        event = event.model_copy(update={"uri": uploaded})
    bootstrap = args.bootstrap or (config.kafka.bootstrap if args.config else None)
    bootstrap = bootstrap or endpoint(args, "bootstrap")
    topic = config.kafka.topic
    if args.bulk:
        if config.kafka.bulk_topic is None:
            raise SubmitFailed("the service has no bulk lane (kafka.bulk_topic is not set)", 2)
        topic = config.kafka.bulk_topic
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        await producer.start()
        try:
            await producer.send_and_wait(topic, event.to_bytes(), key=video_id.encode())
        finally:
            await producer.stop()
    except KafkaError as exc:
        raise SubmitFailed(f"cannot publish to {bootstrap}: {exc}", 1) from exc
    return video_id


async def _get_status(client: httpx.AsyncClient, video_id: str) -> VideoStatus | None:
    response = await client.get(f"/v1/videos/{video_id}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return VideoStatus.model_validate(response.json())


async def follow(args: argparse.Namespace, video_id: str) -> int:
    async with httpx.AsyncClient(
        base_url=endpoint(args, "api"), headers=_headers(args), timeout=10
    ) as client:
        status: VideoStatus | None = None
        with Live(console=console, refresh_per_second=4) as live:
            while not is_final(status):
                try:
                    status = await _get_status(client, video_id)
                except httpx.TransportError:  # the service is still starting: keep asking
                    live.update(f"waiting for the API at {client.base_url} ...")
                if status is not None:
                    live.update(progress_table([status]))
                await asyncio.sleep(0.3)
    assert status is not None
    if status.error_code:
        console.print(f"[red]{status.error_code}: {status.error_message}[/]")
        return 1
    return 0


def show_status(args: argparse.Namespace) -> int:
    async def fetch() -> VideoStatus | None:
        async with httpx.AsyncClient(
            base_url=endpoint(args, "api"), headers=_headers(args), timeout=10
        ) as client:
            return await _get_status(client, args.video_id)

    try:
        status = asyncio.run(fetch())
    except httpx.TransportError as exc:
        console.print(f"[red]cannot reach the API: {exc}[/] (is `reelsense dev` running?)")
        return 2
    if status is None:
        console.print(f"unknown video {args.video_id!r}")
        return 1
    if args.json:
        print(status.model_dump_json(indent=2))
    else:
        console.print(progress_table([status]))
        if status.error_code:
            console.print(f"[red]{status.error_code}: {status.error_message}[/]")
    return 0


def _get(
    args: argparse.Namespace, path: str, params: dict[str, Any] | None
) -> httpx.Response | None:
    """GET ``path`` of the API; None (said on the console) when the API cannot be reached."""
    try:
        return httpx.get(
            f"{endpoint(args, 'api')}{path}", params=params, headers=_headers(args), timeout=60
        )
    except httpx.TransportError as exc:
        console.print(f"[red]cannot reach the API: {exc}[/] (is `reelsense dev` running?)")
        return None


def show_search(args: argparse.Namespace) -> int:
    """Places in videos matching a query, as a table (video, when, what matched, the text,
    the score); ``--json``: the API's answer as it is. Exit 1 on an error answer."""
    params: dict[str, Any] = {"q": args.query, "k": args.k, "method": args.method}
    options = {"tenant": args.tenant, "video": args.video, "from_s": args.from_s}
    options |= {"to_s": args.to_s, "kind": args.kind}
    params |= {name: value for name, value in options.items() if value is not None}
    response = _get(args, "/v1/search", params)
    if response is None:
        return 2
    if response.status_code != 200:
        print(f"{response.status_code}: {_error_text(response)}", file=sys.stderr)
        return 1
    body = response.json()
    if args.json:
        print(json.dumps(body, indent=2, ensure_ascii=False))
        return 0
    console.print(search_table(body))
    return 0


def search_table(body: dict[str, Any]) -> Table:
    """The hits of a ``/v1/search`` answer, best first."""
    table = Table(title=f"{body['query']!r} ({body['method']}): {len(body['hits'])} places")
    table.add_column("video", no_wrap=True)
    table.add_column("when", no_wrap=True)
    table.add_column("matched", no_wrap=True)
    table.add_column("text")
    table.add_column("score", justify="right")
    for hit in body["hits"]:
        when = f"{clock(hit['start_s'])}–{clock(hit['end_s'])}"
        video = hit["video_id"] + (" (partial)" if hit["partial"] else "")
        # Text, not markup: what was read or said may hold brackets rich would read as style.
        kinds, score = ", ".join(hit["kinds"]), f"{hit['score']:.4g}"
        table.add_row(video, when, kinds, Text(hit["text"]), score)
    return table


def show_result(args: argparse.Namespace) -> int:
    """A done video's shots, transcript and on-screen text as spans over time (``--frames``:
    and each sample's lines; ``--json``: the API's answer as it is; ``--vtt``: the transcript,
    the on-screen text or the chapters as WebVTT). Exit 1 when there is no result."""
    path = f"/v1/videos/{quote(args.video_id, safe='')}/result"
    if args.vtt:
        response = _get(args, f"{path}.vtt", {"track": args.vtt})
    else:
        response = _get(args, path, {"frames": "true"} if args.frames else None)
    if response is None:
        return 2
    if response.status_code != 200:
        print(f"{response.status_code}: {_error_text(response)}", file=sys.stderr)
        return 1
    if args.vtt:
        print(response.text, end="")
        return 0
    body = response.json()
    if args.json:
        print(json.dumps(body, indent=2, ensure_ascii=False))
        return 0
    console.print(shots_table(body))
    console.print(transcript(body))
    console.print(result_table(body))
    if (outputs := outputs_table(body)) is not None:
        console.print(outputs)
    for line in stage_lines(body):
        console.print(line)
    if body.get("frames") is not None:
        console.print(frames_table(body["frames"]))
    return 0


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return response.text


def show_dead_letters(args: argparse.Namespace) -> int:
    """List dead letters, or replay the one ``--replay`` names (exit 1 unless it went out)."""
    base, headers = endpoint(args, "api"), _headers(args)
    if args.replay:
        response = httpx.post(
            f"{base}/v1/dead-letters/{args.replay}/replay", headers=headers, timeout=60
        )
    else:
        response = httpx.get(
            f"{base}/v1/dead-letters", params={"limit": args.limit}, headers=headers, timeout=60
        )
    if response.status_code != 200:
        print(f"{response.status_code}: {response.text}", file=sys.stderr)
        return 1
    body = response.json()
    if args.json or args.replay:
        print(json.dumps(body, indent=2, ensure_ascii=False))
        return 0 if not args.replay or body["outcome"] in ("published", "delivered") else 1
    for item in body["items"]:
        print(
            f"{item['id']}  {item['kind']:7s}  {item['at'] or '-'}  "
            f"{item['video_id'] or '-'}  {item['code']}: {item['message'][:120]}"
        )
    return 0
