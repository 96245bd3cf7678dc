"""Redis loses everything mid-run (FLUSHALL), then the service restarts so that the events not
yet committed replay: every video still ends correct in the sinks, nothing doubled."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from bench.soak.chaos_verify import (
    check_frames,
    check_objects,
    check_videos_table,
    check_webhooks,
    expected_timestamps_ms,
    read_statuses,
)
from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from devkit.service_run import ServiceRun
from devkit.services import LocalProcess
from devkit.workload import write_videos
from sinks.lance import LanceSummarySink

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

VIDEOS = 8
SECONDS_PER_SCENE = 4.0  # two scenes: 8 s, 8 samples at 1 fps


@pytest.fixture
def flushable_redis(redis_process: LocalProcess) -> str:
    """The Redis that tests may flush or restart (not the one shared by every test)."""
    return f"redis://127.0.0.1:{redis_process.port}/0"


def _in_sinks(config: ServiceConfig) -> set[str]:
    table = LanceSummarySink.from_settings(config.storage).table
    if table.open() is None:
        return set()
    return {row["video_id"] for row in table.rows(columns=["video_id"])}


async def _wait_settled(
    store: RedisCheckpointStore, config: ServiceConfig, ids: list[str], *, timeout_s: float
) -> None:
    """Until every video is done in its record, or has no record (lost in the flush, offset
    already committed) and is in the sinks; none queued or running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = await read_statuses(store, ids)
        final = all(s.status in (VideoState.DONE, VideoState.FAILED) for s in statuses.values())
        unrecorded = set(ids) - set(statuses)
        lost = unrecorded - _in_sinks(config)
        if final and not lost:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(
        f"neither recorded nor in the sinks: {sorted(lost)}; "
        f"records: { {v: s.status.value for v, s in statuses.items()} }"
    )


async def test_flushall_then_restart(service_run: ServiceRun, flushable_redis: str) -> None:
    run = service_run
    config = run.configure(redis={"url": flushable_redis})
    store = run.store
    videos = write_videos(run.videos_dir, VIDEOS, seconds_per_scene=SECONDS_PER_SCENE)
    ids = sorted(videos)
    expected = {v: expected_timestamps_ms(2 * round(SECONDS_PER_SCENE * 10), 10, 1.0) for v in ids}
    service = run.start_process()
    await run.upload(videos)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        statuses = await read_statuses(store, ids)
        states = [s.status for s in statuses.values()]
        if states.count(VideoState.DONE) >= 2 and VideoState.RUNNING in states:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the service made no progress")

    client = aioredis.Redis.from_url(flushable_redis)
    await client.flushall()
    await client.aclose()
    await asyncio.sleep(2)  # the running service meets the empty Redis
    await asyncio.to_thread(service.kill)
    service.start()
    # Settled may hold already (every video finished before the kill, its record flushed):
    # the restarted process is up and has read what replays before anything is judged.
    await service.wait_healthy()

    await _wait_settled(store, config, ids, timeout_s=240)
    assert await run.wait_committed(timeout_s=120), await run.committed_and_end()
    await asyncio.sleep(3)  # deliveries of rebuilt records
    assert await asyncio.to_thread(service.stop) == 0, service.log_tail()

    statuses = await read_statuses(store, ids)
    assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
    frames, rows = check_frames(config.storage.lance_uri, expected)
    assert frames["missing_rows"] == 0, frames
    assert frames["duplicate_rows"] == 0, frames
    assert frames["unexpected_rows"] == 0, frames
    assert all(s.frames == rows[v] for v, s in statuses.items())
    assert _in_sinks(config) == set(ids)
    table = check_videos_table(config.storage.lance_uri, statuses)
    assert table == {
        "video_rows_missing": 0,
        "video_rows_duplicate": 0,
        "video_rows_mismatched": [],
    }, table
    objects = check_objects(config, ids)
    assert objects["documents_missing"] == [], objects
    assert objects["documents_extra"] == 0, objects
    version = next(iter({s.pipeline_version for s in statuses.values()}))
    hooks = check_webhooks(run.receiver.requests, ids, version)
    assert hooks["duplicate_webhook_ids"] == 0, hooks
    assert hooks["webhooks_with_wrong_id"] == 0, hooks
