"""The whole service through the real broker, Redis, Ray Serve pools, Lance and webhooks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest

from checkpoint.base import VideoState
from core.description import ShotDescription
from devkit.samples import SampleVideo, write_demo_videos
from devkit.service_run import ServiceRun
from devkit.tiny_vlm import build_tiny_qwen2_vl
from devkit.workload import (
    frame_keys,
    lance_tables,
    publish,
    read_records,
    upload_record,
    write_videos,
)

pytestmark = pytest.mark.slow


async def test_eleven_events_end_to_end(service_run: ServiceRun, serve_apps: None) -> None:
    run, receiver = service_run, service_run.receiver
    # Each shot's keyframe described by a tiny random VLM, in a small pool of its own.
    vlm = build_tiny_qwen2_vl(run.videos_dir.parent / "tiny-vlm")
    config = run.configure(stages={"vlm": {"model": str(vlm)}}, ray={"vlm": {"num_cpus": 0.2}})
    videos = write_videos(run.videos_dir, 7)
    # One of them cut at known times, with English and Chinese text and spoken sentences.
    (spoken,) = write_demo_videos(run.videos_dir, 1)
    videos[spoken.path.stem] = spoken.path
    ids = sorted(videos)
    bulk = ids[2]  # by the bulk lane, as a backfill sends it
    records = [upload_record(v, videos[v]) for v in ids if v != bulk]
    records += [upload_record(ids[0], videos[ids[0]])] * 2  # two extra copies of one video
    invalid = (b"bad-event", b'{"video_id": "bad-event", "uri": 42}')

    await run.start_in_process()
    try:
        assert config.kafka.bulk_topic is not None
        await publish(
            config.kafka.bootstrap, config.kafka.bulk_topic, [upload_record(bulk, videos[bulk])]
        )
        await run.publish([*records, invalid])
        statuses = await run.wait_final([*ids, "bad-event"])
        assert {v: s.lane for v, s in statuses.items() if s.lane != "fresh"} == {bulk: "bulk"}

        # Every valid video done, each exactly once in Lance; the invalid one failed visibly.
        for video_id in ids:
            assert statuses[video_id].status is VideoState.DONE, statuses[video_id]
            assert statuses[video_id].frames >= 2
        bad = statuses["bad-event"]
        assert bad.status is VideoState.FAILED
        assert bad.error_code == "event_invalid"
        assert "uri" in (bad.error_message or "")

        keys = frame_keys(Path(config.storage.lance_uri))
        assert not [k for k, n in Counter(keys).items() if n > 1], "duplicate frame rows"
        per_video = Counter(video_id for video_id, _ in keys)
        assert per_video == {v: statuses[v].frames for v in ids}
        # The tables of a fresh run: frames keep the embeddings, no legacy `vectors` table.
        tables = lance_tables(Path(config.storage.lance_uri))
        assert {"frames", "segments", "videos"} <= tables
        assert "vectors" not in tables

        # The dead letter carries the original record and the reason.
        letters = await read_records(config.kafka.bootstrap, config.kafka.dead_letter_topic, 1)
        assert len(letters) == 1
        assert letters[0].key == b"bad-event"
        assert letters[0].header("reelsense-reason-code") == "event_invalid"
        assert letters[0].header("kafka_dlt-original-topic") == config.kafka.topic

        # One signed webhook per video; repeats (if any) carry the same id. The bulk video
        # tells nobody (backfill.notify is off by default).
        announced = [v for v in ids if v != bulk]
        await receiver.wait_for_videos(announced, timeout_s=60)
        assert all(h.verified for h in receiver.requests)
        by_video: dict[str, set[str]] = {}
        for hook in receiver.requests:
            by_video.setdefault(f"{hook.type}:{hook.video_id}", set()).add(hook.webhook_id)
        assert {f"video.done:{v}" for v in announced} <= set(by_video)
        assert f"video.done:{bulk}" not in by_video
        assert all(len(hook_ids) == 1 for hook_ids in by_video.values())
        assert "video.failed:bad-event" in by_video
        lanes = {h.video_id: h.payload["data"]["lane"] for h in receiver.requests}
        assert lanes == {**dict.fromkeys(announced, "fresh"), "bad-event": "fresh"}

        # The API reports each video's final state.
        api = f"http://127.0.0.1:{config.api.port}"
        async with httpx.AsyncClient(base_url=api, timeout=60) as client:
            for video_id in ids:
                response = await client.get(f"/v1/videos/{video_id}")
                assert response.status_code == 200
                assert response.json()["status"] == "done"
                assert response.json()["lane"] == ("bulk" if video_id == bulk else "fresh")
            found = await client.get("/v1/search", params={"q": "harbor", "k": 3})
            assert found.status_code == 200
            assert found.json()["hits"][0]["video_id"] == "vid-01"
            await check_result(client, spoken)
        # The copies of the first video are skipped once it is done, their offsets committed
        # last: wait for that (not a fixed sleep) before stopping.
        assert await run.wait_committed(timeout_s=60)
    finally:
        await run.stop_in_process()

    committed, ends = await run.committed_and_end()
    assert committed == ends


async def check_result(client: httpx.AsyncClient, video: SampleVideo) -> None:
    """What the results API says of a video whose cuts, text and speech are known."""
    video_id = video.path.stem
    response = await client.get(f"/v1/videos/{video_id}/result", params={"words": "true"})
    assert response.status_code == 200, response.text
    result = response.json()

    # Shots: one per scene, each starting within 0.2 s of its cut, with a thumbnail served.
    starts = [shot["start_s"] for shot in result["shots"]]
    assert len(starts) == len(video.scenes)
    assert starts[1:] == pytest.approx(list(video.cut_times_s), abs=0.2)
    for shot in result["shots"]:
        # Schema-valid by constrained decoding, whatever the (random) model says.
        description = ShotDescription.model_validate(shot["description"])
        assert description.scene_type
        assert shot["thumbnail_url"], shot
        thumbnail = await client.get(shot["thumbnail_url"])
        assert thumbnail.status_code == 200
        assert thumbnail.headers["content-type"] == "image/jpeg"

    # Text on screen as spans, English and Chinese, each over its own scene.
    spans = {span["text"]: span for span in result["text_spans"]}
    at = 0.0
    for scene in video.scenes:
        for line in scene.lines:
            assert line in spans, (line, sorted(spans))
            assert spans[line]["start_s"] == pytest.approx(at, abs=1.0)
        at += scene.seconds

    # Speech: the sentences' words, timed on the video's timeline.
    speech = result["speech"]
    assert speech["status"] == "done", speech
    assert speech["language"] == "en"
    heard = {w["text"].strip(".,?!").lower() for s in speech["segments"] for w in s["words"]}
    said = [w.strip(".,?!").lower() for sentence in video.expected_speech for w in sentence.split()]
    assert sum(word in heard for word in said) >= 0.8 * len(said), (said, heard)
    first = video.utterances[0]
    assert speech["segments"][0]["start_s"] == pytest.approx(first.start_s, abs=0.6)
    vtt = await client.get(f"/v1/videos/{video_id}/result.vtt")
    assert vtt.status_code == 200
    assert vtt.text.startswith("WEBVTT")
    assert "invoice" in vtt.text.lower()
