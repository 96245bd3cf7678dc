"""Stop the service mid-run (SIGTERM, then kill -9), start it again: nothing lost or doubled."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from devkit.service_run import ServiceRun
from devkit.workload import frame_keys, write_videos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


async def _wait_progress(store: RedisCheckpointStore, ids: list[str], done_at_least: int) -> None:
    """Until some videos are done and at least one more is part-way through."""
    for _ in range(1200):
        statuses = [await store.get(v) for v in ids]
        done = sum(1 for s in statuses if s and s.status is VideoState.DONE)
        running = sum(1 for s in statuses if s and s.status is VideoState.RUNNING and s.stages)
        if done >= done_at_least and running:
            return
        await asyncio.sleep(0.25)
    raise AssertionError("the service made no progress")


async def test_sigterm_and_kill9_then_restart(service_run: ServiceRun) -> None:
    run = service_run
    videos = write_videos(run.videos_dir, 10, seconds_per_scene=3.0)
    ids = sorted(videos)
    service = run.start_process()
    await run.upload(videos)

    await _wait_progress(run.store, ids, done_at_least=1)
    assert await asyncio.to_thread(service.stop) == 0, service.log_tail()

    service.start()
    await _wait_progress(run.store, ids, done_at_least=4)
    await asyncio.to_thread(service.kill)  # kill -9 of the service and its Ray

    service.start()
    statuses = await run.wait_final(ids, timeout_s=900)
    assert all(s.status is VideoState.DONE for s in statuses.values()), statuses

    keys = frame_keys(Path(run.config.storage.lance_uri))
    assert not [k for k, n in Counter(keys).items() if n > 1], "duplicate frame rows"
    assert Counter(v for v, _ in keys) == {v: statuses[v].frames for v in ids}

    await run.receiver.wait_for_videos(ids, timeout_s=60)
    per_video: dict[str, set[str]] = {}
    for hook in run.receiver.requests:
        per_video.setdefault(hook.video_id, set()).add(hook.webhook_id)
    assert set(per_video) == set(ids)
    assert all(len(hook_ids) == 1 for hook_ids in per_video.values())

    assert await run.wait_committed(timeout_s=30), await run.committed_and_end()
