"""``reelsense demo``: the whole service on this machine, end to end, then a clean exit.

Starts the embedded stack (Tansu, redis-server, local Ray and the service), writes sample
videos with burned-in English and Chinese text, most with English sentences spoken by
espeak-ng, publishes one upload event per video (and one invalid event, to show the
dead-letter path), shows live progress, prints per video its shots, its transcript and the
text on screen over time as the results API answers them (with the addresses of the result
and its WebVTT tracks), runs two searches (across languages) and stops everything it started.
Once the samples are done, it uploads a re-encoded, cropped copy of one of them, which the
``duplicates`` stage finds in the library.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from aiokafka import AIOKafkaProducer
from rich.console import Console
from rich.live import Live

from checkpoint.base import VideoState, VideoStatus
from consumers.events import VideoUploaded
from core.config import ServiceConfig, WebhookSubscription
from devkit.copies import Change, write_copy
from devkit.photo_pans import DARKNET_SUBJECTS, write_darknet_pans
from devkit.progress_view import is_final, progress_table
from devkit.receiver import WebhookReceiver
from devkit.result_view import (
    outputs_table,
    result_table,
    shot_labels,
    shots_table,
    stage_lines,
    transcript,
)
from devkit.run_config import with_sections
from devkit.samples import SampleVideo, write_demo_videos
from devkit.stack import EmbeddedStack
from runtime.cluster import ray_connection
from runtime.service import ReelsenseService

console = Console()
DEMO_TIMEOUT_S = 900.0
#: What the demo's re-upload does to its original.
REUPLOAD = Change("reupload", bitrate_share=1 / 3, crop=0.1)


def run_demo(workdir: Path, *, videos: int, config_path: Path | None) -> int:
    shutil.rmtree(workdir, ignore_errors=True)  # a demo starts from nothing, every time
    base = ServiceConfig.load(config_path)
    # The demo shows what the language model writes (the packaged SmolLM2: the path, not
    # quality), unless its configuration says otherwise.
    if config_path is None:
        base = with_sections(base, stages={"summary": {"enabled": True}})
    with EmbeddedStack(workdir) as stack:
        console.print(f"[bold]broker[/] {stack.bootstrap}  [bold]redis[/] {stack.redis_url}")
        samples = write_demo_videos(workdir / "samples", count=videos)
        photos = write_darknet_pans(workdir / "samples")
        if photos is not None:  # what the labels stage finds needs pictures of real things
            samples.append(SampleVideo(photos, (), 12, (640, 360), 0))
        samples.append(_reupload(samples[-1]))
        console.print(f"wrote {len(samples)} sample videos under {workdir / 'samples'}")
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        config = stack.config(base)
        with ray_connection(config, local=True):
            return asyncio.run(_demo(config, stack, samples, secret))


def _reupload(original: SampleVideo) -> SampleVideo:
    """A re-encoded (a third of the bitrate), cropped (10%) copy of ``original``."""
    path = original.path.with_name(f"{original.path.stem}-reupload.mp4")
    write_copy(original.path, path, REUPLOAD)
    return SampleVideo(path, (), original.fps, original.size, 0, copy_of=original.path.stem)


async def _demo(
    config: ServiceConfig, stack: EmbeddedStack, samples: list[SampleVideo], secret: str
) -> int:
    receiver = await WebhookReceiver(secret=secret).start()
    config = config.model_copy(
        update={
            "notify": config.notify.model_copy(
                update={
                    "webhook_secrets": (secret,),
                    "subscriptions": (WebhookSubscription(url=receiver.url()),),
                }
            )
        }
    )
    config = ServiceConfig.model_validate(config.model_dump())
    service = ReelsenseService(config)
    started = time.monotonic()
    console.print("starting the service (stage pools on Ray, models loading) ...")
    await service.start()
    running = asyncio.create_task(service.run())
    console.print(
        f"service up in {time.monotonic() - started:.1f}s, pipeline {service.pipeline_version}"
    )
    try:
        # The re-upload goes once its original is in the library (analysed and written).
        ids = await _publish(config, samples[:-1])
        statuses = await _follow(service, ids)
        ids += await _publish(config, samples[-1:], invalid=False)
        statuses = await _follow(service, ids)
        await _print_results(stack.api_url, samples, statuses)
        await _wait_for_webhooks(receiver, len(ids))
        console.print(
            f"webhooks: {len(receiver.unique_ids())} received, all signatures verified"
            if all(h.verified for h in receiver.requests)
            else "[red]webhooks: some signatures did not verify[/]"
        )
        await _search_example(stack.api_url)
    finally:
        service.request_stop()
        await running
        await receiver.stop()
    done = sum(1 for s in statuses.values() if s.status is VideoState.DONE)
    console.print(f"[bold]{done}/{len(ids)} videos done[/] in {time.monotonic() - started:.1f}s")
    return 0 if done == len(ids) else 1


async def _publish(
    config: ServiceConfig, samples: list[SampleVideo], *, invalid: bool = True
) -> list[str]:
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap, acks="all")
    await producer.start()
    try:
        ids = []
        for sample in samples:
            event = VideoUploaded(video_id=sample.path.stem, uri=sample.path.resolve().as_uri())
            await producer.send_and_wait(
                config.kafka.topic, event.to_bytes(), key=event.video_id.encode()
            )
            ids.append(event.video_id)
        if invalid:  # one malformed event: it ends in the dead-letter topic, the service goes on
            await producer.send_and_wait(
                config.kafka.topic, b'{"video_id": "broken-event"}', key=b"broken-event"
            )
    finally:
        await producer.stop()
    console.print(f"published {len(ids)} upload events" + (" and 1 invalid one" if invalid else ""))
    return ids


async def _follow(service: ReelsenseService, ids: list[str]) -> dict[str, VideoStatus]:
    deadline = time.monotonic() + DEMO_TIMEOUT_S
    statuses: dict[str, VideoStatus] = {}
    with Live(console=console, refresh_per_second=4) as live:
        while time.monotonic() < deadline:
            for video_id in ids:
                status = await service.store.get(video_id)
                if status is not None:
                    statuses[video_id] = status
            live.update(progress_table(statuses[v] for v in ids if v in statuses))
            if len(statuses) == len(ids) and all(is_final(s) for s in statuses.values()):
                break
            await asyncio.sleep(0.25)
    return statuses


async def _print_results(
    api_url: str, samples: list[SampleVideo], statuses: dict[str, VideoStatus]
) -> None:
    """Per video, what the results API answers: its shots, its transcript, its text on screen
    over time and what the video stages found (its chapters), checked against what the sample
    shows and says, and where the result and its WebVTT tracks can be fetched."""
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as client:
        for sample in samples:
            video_id = sample.path.stem
            status = statuses.get(video_id)
            console.rule(f"{video_id}  ({status.status.value if status else 'unknown'})")
            if status is None or status.status is not VideoState.DONE:
                if status is not None:
                    console.print(f"[red]{status.error_code}: {status.error_message}[/]")
                continue
            path = f"/v1/videos/{quote(video_id, safe='')}/result"
            response = await client.get(path)
            if response.status_code != 200:
                console.print(f"[red]result: {response.status_code} {response.text}[/]")
                continue
            body = response.json()
            console.print(shots_table(body))
            console.print(transcript(body))
            console.print(result_table(body))
            if (outputs := outputs_table(body)) is not None:  # the chapters, among them
                console.print(outputs)
            for line in stage_lines(body):
                console.print(line)
            _print_checks(sample, body)
            console.print(f"  result: {api_url}{path}  (each spoken word's times: ?words=true)")
            console.print(f"  transcript as WebVTT: {api_url}{path}.vtt?track=speech")
            console.print(f"  on-screen text as WebVTT: {api_url}{path}.vtt?track=text")
            console.print(f"  chapters as WebVTT: {api_url}{path}.vtt?track=chapters")


def _print_checks(sample: SampleVideo, body: dict[str, Any]) -> None:
    """Whether each text the sample shows was read, how many words of each sentence it says
    were heard (Whisper tiny.en mishears a word of espeak-ng's voice now and then), and for
    the photographs whether each shot's labels name what it shows."""
    found = _normalise(" ".join(span["text"] for span in body["text_spans"]))
    for expected in sample.expected_texts:
        mark = "[green]found[/]" if _normalise(expected) in found else "[red]missing[/]"
        console.print(f"  expected {expected!r}: {mark}")
    segments = (body.get("speech") or {}).get("segments") or []
    heard = set(_words(" ".join(segment["text"] for segment in segments)))
    for sentence in sample.expected_speech:
        words = _words(sentence)
        count = sum(word in heard for word in words)
        colour = "green" if count == len(words) else "yellow" if count else "red"
        console.print(f"  said {sentence!r}: [{colour}]heard {count}/{len(words)} words[/]")
    if sample.copy_of is not None:
        output = ((body.get("outputs") or {}).get("duplicates") or {}).get("data") or {}
        copies = [d["video_id"] for d in output.get("duplicates") or ()]
        mark = "[green]found[/]" if sample.copy_of in copies else "[red]missing[/]"
        console.print(f"  a re-encoded, cropped copy of {sample.copy_of}: {mark}")
    elif not sample.scenes:  # the photographs: what each shot shows
        shown = shot_labels(body) or {}
        for shot, (photo, kind) in enumerate(DARKNET_SUBJECTS.items()):
            names = [label["name"] for label in shown.get(shot, [])]
            mark = "[green]found[/]" if kind in names else "[red]missing[/]"
            console.print(f"  shot {shot} ({photo}.jpg) shows {kind!r}: {mark}")


async def _wait_for_webhooks(receiver: WebhookReceiver, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(receiver.unique_ids()) < count and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)


# The demo's searches: an English word among the signs, shown in Chinese only; a Chinese
# question answered by an English sentence (said in the invoice video); a word anywhere; and
# what a photograph shows, asked in Chinese ("dog").
SEARCHES = (("welcome", "text"), ("付款前请检查发票", "speech"), ("welcome", None), ("狗", "label"))


async def _search_example(api_url: str) -> None:
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as client:
        for query, kind in SEARCHES:
            params: dict[str, str | int] = {"q": query, "k": 3}
            if kind:
                params["kind"] = kind
            response = await client.get("/v1/search", params=params)
            if response.status_code != 200:
                console.print(f"[red]search failed: {response.status_code} {response.text}[/]")
                return
            console.rule(f"search: {query!r}" + (f" in {kind}" if kind else ""))
            for hit in response.json()["hits"]:
                when = f"{hit['start_s']:.1f}-{hit['end_s']:.1f}s"
                kinds = "+".join(hit["kinds"])
                console.print(f"  {hit['video_id']} @ {when} ({kinds})  {hit['text']!r}")


def _normalise(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _words(text: str) -> list[str]:
    return [word for word in map(_normalise, text.split()) if word]
