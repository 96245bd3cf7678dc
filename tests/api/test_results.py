"""``GET /v1/videos/{id}/result`` over a real Redis store and result documents written by the
real sink into a folder object store; ``reelsense result`` against the app served by uvicorn."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from PIL import Image as PILImage

from api.app import api_server, create_app
from checkpoint.base import OutboxEvent
from checkpoint.redis_store import RedisCheckpointStore
from cli.main import main as cli_main
from core.records import ShotBoundary, VideoRef, VideoResult
from core.shots import video_shots
from core.spans import text_spans
from core.speech import AudioEvent, Speech, SpeechSegment, SpokenWord
from devkit.services import free_port
from sinks.object_store import ResultDocumentSink, document_key, encode_document, result_document
from stages.sampling import thumbnail
from storage.local import LocalObjectStore
from tests.sinks import make_result

PIPELINE = "pv-results"
CUT = ShotBoundary(2.9, "cut", 31.5, 2.9, 2.9)
TOKENS = {"token-a": "acme", "token-b": "globex"}
A = {"authorization": "Bearer token-a"}
B = {"authorization": "Bearer token-b"}
# Half-second samples: a room sign read three times (once misread), gone for one sample
# (flicker), read twice more, then a different text in its place.
TEXTS = [
    "SERVER ROOM B7",
    "SERVER R0OM B7",
    "SERVER ROOM B7",
    "",
    "SERVER ROOM B7",
    "SERVER ROOM B7",
    "EXIT ONLY",
    "EXIT ONLY",
]
# What is said over the sign: two sentences, the second misheard in part (low log-probability).
SPOKEN = Speech(
    status="done",
    language="en",
    audio_s=4.0,
    segments=(
        SpeechSegment(
            0.5,
            2.25,
            "The server room is on the left.",
            -0.21,
            0.02,
            (SpokenWord(" The", 0.5, 0.62, 0.98), SpokenWord(" server", 0.62, 1.1, 0.91)),
            "en",
            0.96,
        ),
        SpeechSegment(
            3.0,
            3.875,
            "Please use the <exit> & stairs.",
            -1.4,
            0.3,
            (SpokenWord(" Please", 3.0, 3.3, 0.6),),
            "de",  # the side of a window heard as another language
            0.71,
        ),
    ),
    # A tune under the talk, heard all along.
    events=(AudioEvent("music", 0.0, 4.0, 0.97), AudioEvent("speech", 0.45, 3.9, 0.93)),
)


@pytest.fixture
async def store(redis_url: str, unique: str) -> AsyncIterator[RedisCheckpointStore]:
    opened = RedisCheckpointStore.from_url(redis_url, key_prefix=f"results-{unique}")
    yield opened
    await opened.close()


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://api")


def sign_video(video_id: str, tenant: str = "acme", speech: Speech | None = None) -> VideoResult:
    result = make_result(
        video_id, frames=len(TEXTS), texts=TEXTS, tenant=tenant, version=PIPELINE, embed=False
    )
    # A presigned source URL: its signature must not come back out of the API.
    uri = f"https://user:secret@cdn.example/{video_id}.mp4?X-Amz-Signature=abc"
    # A cut at 2.9 s, given by the decoder to the next sample (3.0 s, where the sign changes).
    frames = list(result.frames)
    frames[6] = dataclasses.replace(frames[6], boundaries=(CUT,))
    return dataclasses.replace(
        result,
        ref=dataclasses.replace(result.ref, uri=uri),
        frames=frames,
        stage_versions={"decode": "d1", "ocr": "o1"},
        speech=speech,
    )


async def mark_done(store: RedisCheckpointStore, result: VideoResult) -> None:
    """The checkpoint side of a finished video, as the runtime records it after the sinks."""
    ref = result.ref
    claim = await store.claim(ref, result.pipeline_version)
    await store.advance(ref.video_id, claim.epoch, "ocr", 1, 1)
    outbox = OutboxEvent(
        type="video.done",
        video_id=ref.video_id,
        tenant=ref.tenant,
        pipeline_version=result.pipeline_version,
        timestamp=datetime.now(UTC),
    )
    await store.mark_done(
        ref.video_id, claim.epoch, frames=len(result.frames), timings={}, outbox=outbox
    )


async def done_video(
    store: RedisCheckpointStore,
    objects: LocalObjectStore,
    video_id: str,
    tenant: str = "acme",
    speech: Speech | None = None,
) -> VideoResult:
    """A result written through the real document sink, then marked done."""
    result = sign_video(video_id, tenant, speech)
    ResultDocumentSink(objects).write([result])
    await mark_done(store, result)
    return result


async def test_a_document_is_parsed_once_per_stored_version(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    """The result, its WebVTT tracks and every shot's thumbnail read one parse of the stored
    document (made off the event loop); a document written again with other bytes is parsed
    anew and served as it is now, under a new ETag."""
    result = await done_video(store, objects, "parsed-once", speech=SPOKEN)
    app = create_app(store, tokens={}, results=objects)
    documents = app.state.api_context.documents
    async with client_for(app) as client:
        first = await client.get("/v1/videos/parsed-once/result")
        shots = first.json()["shots"]
        for _ in range(3):
            assert (await client.get("/v1/videos/parsed-once/result?frames=true")).is_success
            for track in ("speech", "text"):
                vtt = await client.get(f"/v1/videos/parsed-once/result.vtt?track={track}")
                assert vtt.is_success
            for shot in shots:
                image = await client.get(
                    f"/v1/videos/parsed-once/shots/{shot['index']}/thumbnail.jpg"
                )
                assert image.status_code in (200, 404)
        assert documents.parsed == 1
        ResultDocumentSink(objects).write([dataclasses.replace(result, speech=None)])
        again = await client.get("/v1/videos/parsed-once/result")
    assert documents.parsed == 2
    assert first.json()["speech"] is not None
    assert again.json()["speech"] is None
    assert again.headers["etag"] != first.headers["etag"]


async def test_a_done_videos_result_has_its_text_spans(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "sign-1")
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        response = await client.get("/v1/videos/sign-1/result")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["video"] == {
        "video_id": "sign-1",
        "tenant": "acme",
        "uri": "https://***@cdn.example/sign-1.mp4?***",
    }
    assert body["pipeline_version"] == PIPELINE
    assert body["stage_versions"] == {"decode": "d1", "ocr": "o1"}
    assert body["completed_at"].startswith("2025-01-02T03:04:05")
    assert body["probe"] == {"duration_s": 4.0, "width": 1280, "height": 720, "fps": 25.0}
    spans = [(s["text"], s["start_s"], s["end_s"], s["frames"]) for s in body["text_spans"]]
    assert spans == [("SERVER ROOM B7", 0.0, 3.0, 5), ("EXIT ONLY", 3.0, 4.0, 2)]
    assert body["text_spans"][0]["box"] == [[0, 0], [10, 0], [10, 5], [0, 5]]
    assert body["shots"] == [
        {
            "index": 0,
            "start_s": 0.0,
            "end_s": 2.9,
            "entered_by": "start",
            "transition_s": None,
            "keyframe": 0,
            "keyframe_s": 0.0,
            "samples": 6,
            "thumbnail_url": None,
            "description": None,
        },
        {
            "index": 1,
            "start_s": 2.9,
            "end_s": 4.0,
            "entered_by": "cut",
            "transition_s": None,
            "keyframe": 6,
            "keyframe_s": 3.0,
            "samples": 2,
            "thumbnail_url": None,
            "description": None,
        },
    ]
    assert body["frames"] is None  # only when asked for
    assert body["speech"] is None  # recognition was off


async def test_frames_come_with_frames_true(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "sign-2")
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        response = await client.get("/v1/videos/sign-2/result", params={"frames": "true"})
    frames = response.json()["frames"]
    assert [f["timestamp_s"] for f in frames] == [i * 0.5 for i in range(len(TEXTS))]
    assert [[line["text"] for line in f["ocr_lines"]] for f in frames] == [
        [text] if text else [] for text in TEXTS
    ]
    assert response.json()["text_spans"][0]["text"] == "SERVER ROOM B7"


async def test_etag_and_if_none_match(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "sign-3")
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        first = await client.get("/v1/videos/sign-3/result")
        tag = first.headers["etag"]
        again = await client.get("/v1/videos/sign-3/result")
        unchanged = await client.get("/v1/videos/sign-3/result", headers={"if-none-match": tag})
        listed = await client.get(
            "/v1/videos/sign-3/result", headers={"if-none-match": f'"stale", W/{tag}'}
        )
        anything = await client.get("/v1/videos/sign-3/result", headers={"if-none-match": "*"})
        stale = await client.get("/v1/videos/sign-3/result", headers={"if-none-match": '"x"'})
        with_frames = await client.get("/v1/videos/sign-3/result", params={"frames": "true"})
        # The stored document changes (a rerun under the same version): so does the tag.
        rewritten = dataclasses.replace(sign_video("sign-3"), timings={"ocr": 9.0})
        ResultDocumentSink(objects).write([rewritten])
        after = await client.get("/v1/videos/sign-3/result", headers={"if-none-match": tag})
    assert re.fullmatch(r'"[0-9a-f]{32}"', tag)  # strong: no W/ prefix
    assert again.headers["etag"] == tag
    for not_modified in (unchanged, listed, anything):
        assert not_modified.status_code == 304
        assert not_modified.content == b""
        assert not_modified.headers["etag"] == tag
    assert stale.status_code == 200
    assert stale.json() == first.json()
    assert with_frames.headers["etag"] != tag  # another query, another representation
    assert after.status_code == 200
    assert after.headers["etag"] != tag


async def test_a_video_not_done_is_a_409(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    queued = VideoRef("waiting", "file:///v/waiting.mp4", "acme")
    await store.mark_queued(queued, PIPELINE)
    running = VideoRef("busy", "file:///v/busy.mp4", "acme")
    claim = await store.claim(running, PIPELINE)
    await store.advance("busy", claim.epoch, "ocr", 1, 4)
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        busy = await client.get("/v1/videos/busy/result")
        waiting = await client.get("/v1/videos/waiting/result")
    assert busy.status_code == 409
    assert busy.json()["error"]["code"] == "result_not_ready"
    assert "running" in busy.json()["error"]["message"]
    assert waiting.status_code == 409
    assert "queued" in waiting.json()["error"]["message"]


async def test_another_tenants_video_is_a_404_like_a_missing_one(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "sign-4", tenant="acme")
    app = create_app(store, tokens=TOKENS, results=objects)
    async with client_for(app) as client:
        own = await client.get("/v1/videos/sign-4/result", headers=A)
        other = await client.get("/v1/videos/sign-4/result", headers=B)
        missing = await client.get("/v1/videos/no-such-video/result", headers=B)
        anonymous = await client.get("/v1/videos/sign-4/result")
    assert own.status_code == 200
    assert own.json()["video"]["tenant"] == "acme"
    assert other.status_code == missing.status_code == 404
    assert other.json()["error"]["code"] == missing.json()["error"]["code"] == "not_found"
    assert "etag" not in other.headers
    assert anonymous.status_code == 401


async def test_a_done_video_without_its_document_is_result_missing(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await mark_done(store, sign_video("lost"))  # done, but nothing in the object store
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        response = await client.get("/v1/videos/lost/result")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "result_missing"


async def test_a_document_written_before_spans_and_shots_gets_them_on_reading(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    result = sign_video("older")
    document = result_document(result)
    del document["text_spans"], document["shots"]
    key = document_key("acme", "older", PIPELINE)
    objects.put_bytes(key, encode_document(document))
    await mark_done(store, result)
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        response = await client.get("/v1/videos/older/result")
    assert response.status_code == 200
    expected = [span.to_json() for span in text_spans(result.frames)]
    assert response.json()["text_spans"] == expected
    made = video_shots(result.frames, result.probe.duration_s)
    shots = [{**shot.to_json(), "thumbnail_url": None, "description": None} for shot in made]
    assert response.json()["shots"] == shots
    assert [shot["entered_by"] for shot in shots] == ["start", "cut"]


def with_thumbnails(result: VideoResult) -> VideoResult:
    """The result with a JPEG on the first sample of each shot, as the decoder makes them."""
    frames = list(result.frames)
    for index, shade in ((0, 40), (6, 200)):
        image = np.full((36, 64, 3), shade, dtype=np.uint8)
        frames[index] = dataclasses.replace(frames[index], thumbnail=thumbnail(image, 32))
    return dataclasses.replace(result, frames=frames)


async def test_thumbnails_are_served_per_shot(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    result = with_thumbnails(sign_video("thumbs"))
    ResultDocumentSink(objects).write([result])
    await mark_done(store, result)
    async with client_for(create_app(store, tokens=TOKENS, results=objects)) as client:
        body = (await client.get("/v1/videos/thumbs/result", headers=A)).json()
        urls = [shot["thumbnail_url"] for shot in body["shots"]]
        assert urls == [f"/v1/videos/thumbs/shots/{i}/thumbnail.jpg" for i in (0, 1)]
        second = await client.get(urls[1], headers=A)
        again = await client.get(urls[1], headers={**A, "if-none-match": second.headers["etag"]})
        beyond = await client.get("/v1/videos/thumbs/shots/2/thumbnail.jpg", headers=A)
        other_tenant = await client.get(urls[1], headers=B)
    assert second.status_code == 200
    assert second.headers["content-type"] == "image/jpeg"
    assert second.content == result.frames[6].thumbnail
    assert PILImage.open(io.BytesIO(second.content)).size == (32, 18)
    assert again.status_code == 304
    assert beyond.status_code == 404
    assert beyond.json()["error"]["code"] == "not_found"
    assert other_tenant.status_code == 404


async def test_a_shot_without_a_thumbnail_is_thumbnail_missing(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "no-thumbs")  # made with thumbnails off
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        response = await client.get("/v1/videos/no-thumbs/shots/0/thumbnail.jpg")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "thumbnail_missing"


async def test_timed_text_as_webvtt(store: RedisCheckpointStore, objects: LocalObjectStore) -> None:
    await done_video(store, objects, "vtt", speech=SPOKEN)
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        text = await client.get("/v1/videos/vtt/result.vtt", params={"track": "text"})
        speech = await client.get("/v1/videos/vtt/result.vtt")
        bad = await client.get("/v1/videos/vtt/result.vtt", params={"track": "music"})
    assert text.status_code == 200
    assert text.headers["content-type"].startswith("text/vtt")
    assert text.text == (
        "WEBVTT\n\n1\n00:00:00.000 --> 00:00:03.000\nSERVER ROOM B7\n\n"
        "2\n00:00:03.000 --> 00:00:04.000\nEXIT ONLY\n"
    )
    assert speech.status_code == 200
    assert speech.headers["content-type"].startswith("text/vtt")
    assert speech.text == (
        "WEBVTT\n\n1\n00:00:00.500 --> 00:00:02.250\nThe server room is on the left.\n\n"
        "2\n00:00:03.000 --> 00:00:03.875\nPlease use the &lt;exit&gt; &amp; stairs.\n"
    )
    assert text.headers["etag"] != speech.headers["etag"]
    assert bad.status_code == 422


async def test_speech_segments_and_their_words_only_when_asked(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "spoken", speech=SPOKEN)
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        plain = await client.get("/v1/videos/spoken/result")
        worded = await client.get("/v1/videos/spoken/result", params={"words": "true"})
        again = await client.get(
            "/v1/videos/spoken/result",
            params={"words": "true"},
            headers={"if-none-match": worded.headers["etag"]},
        )
        crossed = await client.get(
            "/v1/videos/spoken/result", headers={"if-none-match": worded.headers["etag"]}
        )
    speech = plain.json()["speech"]
    assert {key: speech[key] for key in ("status", "language", "audio_s", "error")} == {
        "status": "done",
        "language": "en",
        "audio_s": 4.0,
        "error": None,
    }
    assert speech["segments"] == [
        {
            "start_s": 0.5,
            "end_s": 2.25,
            "text": "The server room is on the left.",
            "language": "en",
            "language_probability": 0.96,
            "avg_logprob": -0.21,
            "no_speech_prob": 0.02,
            "words": None,
        },
        {
            "start_s": 3.0,
            "end_s": 3.875,
            "text": "Please use the <exit> & stairs.",
            "language": "de",
            "language_probability": 0.71,
            "avg_logprob": -1.4,
            "no_speech_prob": 0.3,
            "words": None,
        },
    ]
    assert speech["audio_events"] == [
        {"kind": "music", "start_s": 0.0, "end_s": 4.0, "confidence": 0.97},
        {"kind": "speech", "start_s": 0.45, "end_s": 3.9, "confidence": 0.93},
    ]
    segments = worded.json()["speech"]["segments"]
    assert [[(w["text"], w["start_s"], w["end_s"]) for w in s["words"]] for s in segments] == [
        [(" The", 0.5, 0.62), (" server", 0.62, 1.1)],
        [(" Please", 3.0, 3.3)],
    ]
    assert segments[1]["words"][0]["probability"] == 0.6
    assert [s["text"] for s in segments] == [s["text"] for s in speech["segments"]]
    # Words or not are two representations of one document: each has its own tag.
    assert worded.headers["etag"] != plain.headers["etag"]
    assert again.status_code == 304
    assert crossed.status_code == 200


async def test_a_video_without_audio_has_no_speech_and_an_empty_track(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "silent", speech=Speech(status="no_audio"))
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        body = (await client.get("/v1/videos/silent/result", params={"words": "true"})).json()
        vtt = await client.get("/v1/videos/silent/result.vtt")
    assert body["speech"] == {
        "status": "no_audio",
        "language": None,
        "audio_s": 0.0,
        "segments": [],
        "audio_events": [],
        "error": None,
    }
    assert vtt.status_code == 200
    assert vtt.text == "WEBVTT\n"  # a valid file of no cues


async def test_failed_speech_keeps_what_came_before_and_says_why(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    failed = dataclasses.replace(
        SPOKEN,
        status="failed",
        segments=SPOKEN.segments[:1],
        error_code="audio_decode_error",
        error_message="cannot decode the audio track at 30.0 s: invalid data",
    )
    await done_video(store, objects, "cut-off", speech=failed)
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        speech = (await client.get("/v1/videos/cut-off/result")).json()["speech"]
        vtt = await client.get("/v1/videos/cut-off/result.vtt")
    assert speech["status"] == "failed"
    assert speech["error"] == {
        "code": "audio_decode_error",
        "message": "cannot decode the audio track at 30.0 s: invalid data",
    }
    assert [s["text"] for s in speech["segments"]] == ["The server room is on the left."]
    assert (
        vtt.text == "WEBVTT\n\n1\n00:00:00.500 --> 00:00:02.250\nThe server room is on the left.\n"
    )


async def test_a_document_written_before_speech_answers_without_it(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    result = sign_video("pre-speech")
    document = result_document(result)
    del document["speech"]
    objects.put_bytes(document_key("acme", "pre-speech", PIPELINE), encode_document(document))
    await mark_done(store, result)
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        response = await client.get("/v1/videos/pre-speech/result", params={"words": "true"})
        vtt = await client.get("/v1/videos/pre-speech/result.vtt", params={"track": "speech"})
    assert response.status_code == 200
    assert response.json()["speech"] is None
    assert response.json()["text_spans"][0]["text"] == "SERVER ROOM B7"
    assert vtt.status_code == 200
    assert vtt.text == "WEBVTT\n"


async def test_without_a_result_store_results_are_unavailable(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    await done_video(store, objects, "sign-5")
    async with client_for(create_app(store, tokens={})) as client:
        response = await client.get("/v1/videos/sign-5/result")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "results_unavailable"


async def test_the_app_closes_a_result_store_it_owns(
    redis_url: str, unique: str, tmp_path: Path
) -> None:
    class Recording(LocalObjectStore):
        closed = False

        def close(self) -> None:
            self.closed = True

    results = Recording(tmp_path / "objects")
    own_store = RedisCheckpointStore.from_url(redis_url, key_prefix=f"results-{unique}")
    app = create_app(own_store, tokens={}, results=results, owns_store=True)
    async with app.router.lifespan_context(app):
        assert not results.closed
    assert results.closed


async def test_cli_prints_spans_and_json(
    store: RedisCheckpointStore, objects: LocalObjectStore, capsys: pytest.CaptureFixture[str]
) -> None:
    await done_video(store, objects, "sign-6", speech=SPOKEN)
    failed = dataclasses.replace(
        SPOKEN, status="failed", segments=(), audio_s=0.0, error_code="audio_unsupported"
    )
    await done_video(
        store,
        objects,
        "sign-7",
        speech=dataclasses.replace(failed, error_message="no decoder for [opus]"),
    )
    await done_video(store, objects, "sign-8")  # speech recognition off
    await store.mark_queued(VideoRef("later", "file:///v/later.mp4", "acme"), PIPELINE)
    port = free_port()
    server = api_server(create_app(store, tokens=TOKENS, results=objects), "127.0.0.1", port)
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.02)
    api = ["--api", f"http://127.0.0.1:{port}", "--token", "token-a"]

    async def printed(*argv: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(cli_main, [*argv, *api])
        out, err = capsys.readouterr()
        return code, out, err

    try:
        _, table, _ = await printed("result", "sign-6")
        _, as_json, _ = await printed("result", "sign-6", "--json")
        _, with_frames, _ = await printed("result", "sign-6", "--frames")
        _, speech_vtt, _ = await printed("result", "sign-6", "--vtt")
        _, text_vtt, _ = await printed("result", "sign-6", "--vtt", "text")
        _, failed_table, _ = await printed("result", "sign-7")
        _, off_table, _ = await printed("result", "sign-8")
        not_ready = await printed("result", "later")
    finally:
        server.should_exit = True
        await serving
    assert "SERVER ROOM B7" in table
    assert "0:02.9–0:04.0" in table  # the second shot
    assert "cut" in table
    assert "0:00.0–0:03.0" in table
    assert "0:03.0–0:04.0" in table
    assert "SERVER R0OM B7" not in table  # the misreading is folded into its span
    assert "0:00.5–0:02.2" in table  # the first segment (2.25 s shown to the tenth)
    assert "The server room is on the left." in table
    assert "Please use the <exit> & stairs." in table
    assert "language en (also de); 0:04.0 of audio, 2 segments" in table
    assert "audio: music 0:00.0–0:04.0\n" in table  # its speech is the transcript's
    body = json.loads(as_json)
    assert [s["text"] for s in body["text_spans"]] == ["SERVER ROOM B7", "EXIT ONLY"]
    assert body["frames"] is None
    assert [s["text"] for s in body["speech"]["segments"]] == [
        "The server room is on the left.",
        "Please use the <exit> & stairs.",
    ]
    assert "SERVER R0OM B7" in with_frames  # each sample's lines, as read
    assert speech_vtt.startswith("WEBVTT\n\n1\n00:00:00.500 --> 00:00:02.250\nThe server room")
    assert "00:00:03.000 --> 00:00:04.000\nEXIT ONLY" in text_vtt
    assert "failed after 0:00.0 of audio, 0 segments: audio_unsupported: no decoder for [opus]" in (
        " ".join(failed_table.split())
    )
    assert "speech: recognition was off" in off_table
    assert not_ready[0] == 1
    assert "409: result_not_ready" in not_ready[2]
