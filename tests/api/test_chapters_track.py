"""The chapters of a done video as a WebVTT chapters track, from its stored result."""

from __future__ import annotations

import dataclasses

from api.app import create_app
from checkpoint.redis_store import RedisCheckpointStore
from core.outputs import OutputSegment, VideoOutput
from sinks.object_store import ResultDocumentSink
from storage.local import LocalObjectStore
from tests.api.test_results import client_for, mark_done, objects, sign_video, store

__all__ = ["objects", "store"]  # the fixtures, shared with the results tests

CHAPTERS = [
    {"start_s": 0.0, "end_s": 2.9, "title": "SERVER ROOM B7", "summary": "Where it is."},
    {"start_s": 2.9, "end_s": 4.0, "title": "Exits <and> stairs", "summary": "Use them."},
]


async def test_the_chapters_track_has_a_cue_per_chapter(
    store: RedisCheckpointStore, objects: LocalObjectStore
) -> None:
    result = sign_video("chaptered")
    segments = tuple(
        OutputSegment("chapter", c["start_s"], c["end_s"], c["title"], searchable=True)
        for c in CHAPTERS
    )
    chaptered = dataclasses.replace(
        result, outputs={"chapters": VideoOutput({"chapters": CHAPTERS}, segments)}
    )
    ResultDocumentSink(objects).write([chaptered, sign_video("unchaptered")])
    await mark_done(store, chaptered)
    await mark_done(store, sign_video("unchaptered"))
    async with client_for(create_app(store, tokens={}, results=objects)) as client:
        track = await client.get("/v1/videos/chaptered/result.vtt", params={"track": "chapters"})
        speech = await client.get("/v1/videos/chaptered/result.vtt", params={"track": "speech"})
        none = await client.get("/v1/videos/unchaptered/result.vtt?track=chapters")
    assert track.status_code == 200
    assert track.headers["content-type"].startswith("text/vtt")
    assert track.text == (
        "WEBVTT\n\n1\n00:00:00.000 --> 00:00:02.900\nSERVER ROOM B7\n\n"
        "2\n00:00:02.900 --> 00:00:04.000\nExits &lt;and&gt; stairs\n"
    )
    assert track.headers["etag"] != speech.headers["etag"]
    assert none.status_code == 200
    assert none.text == "WEBVTT\n"  # processed without the chapters stage: a track of none
