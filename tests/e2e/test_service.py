"""The whole service through the real broker, Redis, Ray Serve pools, Lance and webhooks."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from checkpoint.base import VideoState
from devkit.receiver import WebhookReceiver
from devkit.services import free_port
from runtime.service import ReelsenseService
from tests.e2e.support import (
    committed_and_end,
    dead_letters,
    frame_keys,
    publish,
    service_config,
    upload_record,
    wait_final,
    webhook_secret,
    write_videos,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def api_port() -> int:
    return free_port()


async def test_eleven_events_end_to_end(
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_url: str,
    serve_apps: None,
    unique: str,
    api_port: int,
) -> None:
    secret = webhook_secret()
    receiver = await WebhookReceiver(secret=secret).start()
    config = service_config(
        tmp_path,
        bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        unique=unique,
        api_port=api_port,
        hook_url=receiver.url,
        secret=secret,
    )
    videos = write_videos(tmp_path / "videos", 8)
    ids = sorted(videos)
    records = [upload_record(v, videos[v]) for v in ids]
    records += [upload_record(ids[0], videos[ids[0]])] * 2  # two extra copies of one video
    records.append((b"bad-event", b'{"video_id": "bad-event", "uri": 42}'))  # invalid

    service = ReelsenseService(config)
    await service.start()
    running = asyncio.create_task(service.run())
    try:
        await publish(kafka_bootstrap, config.kafka.topic, records)
        statuses = await wait_final(service.store, [*ids, "bad-event"])

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

        # The dead letter carries the original record and the reason.
        letters = await dead_letters(kafka_bootstrap, config.kafka.dead_letter_topic, 1)
        assert len(letters) == 1
        key, headers = letters[0]
        assert key == b"bad-event"
        assert headers["reelsense-reason-code"] == "event_invalid"
        assert headers["kafka_dlt-original-topic"] == config.kafka.topic

        # One signed webhook per video; repeats (if any) carry the same id.
        deadline = asyncio.get_running_loop().time() + 60
        while asyncio.get_running_loop().time() < deadline:
            done_ids = {
                h.video_id: h.webhook_id for h in receiver.received if h.type == "video.done"
            }
            if set(done_ids) >= set(ids):
                break
            await asyncio.sleep(0.2)
        assert all(h.verified for h in receiver.received)
        by_video: dict[str, set[str]] = {}
        for hook in receiver.received:
            by_video.setdefault(f"{hook.type}:{hook.video_id}", set()).add(hook.webhook_id)
        assert {f"video.done:{v}" for v in ids} <= set(by_video)
        assert all(len(hook_ids) == 1 for hook_ids in by_video.values())
        assert "video.failed:bad-event" in by_video

        # The API reports each video's final state.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=60) as client:
            for video_id in ids:
                response = await client.get(f"/v1/videos/{video_id}")
                assert response.status_code == 200
                assert response.json()["status"] == "done"
            found = await client.get("/v1/search", params={"q": "harbor", "k": 3})
            assert found.status_code == 200
            assert found.json()["hits"][0]["video_id"] == "vid-01"
    finally:
        service.request_stop()
        await running
        await receiver.stop()

    committed, ends = await committed_and_end(
        kafka_bootstrap, config.kafka.topic, config.kafka.group_id
    )
    assert committed == ends
