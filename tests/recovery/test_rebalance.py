"""Two service processes in one consumer group: the second joins mid-run (a rebalance moves
partitions with videos in flight), then the first leaves on SIGTERM. No double effects."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench.soak.chaos_verify import expected_timestamps_ms, read_statuses, verify
from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from devkit.service_process import ServiceProcess
from devkit.service_run import ServiceRun
from devkit.workload import write_videos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

VIDEOS = 10
SECONDS_PER_SCENE = 5.0  # two scenes: 10 s, 10 samples at 1 fps, 5 chunks


async def _wait_states(
    store: RedisCheckpointStore,
    ids: list[str],
    processes: list[ServiceProcess],
    *,
    done: int = 0,
    running: int = 0,
) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        statuses = [await store.get(v) for v in ids]
        states = [s.status for s in statuses if s is not None]
        if states.count(VideoState.DONE) >= done and states.count(VideoState.RUNNING) >= running:
            return
        await asyncio.sleep(0.2)
    logs = "\n".join(f"--- {p.log_path.name}:\n{p.log_tail()}" for p in processes)
    raise AssertionError(f"not {done} done and {running} running in time: {states}\n{logs}")


async def test_join_and_leave_mid_run(service_run: ServiceRun) -> None:
    run, config, store = service_run, service_run.config, service_run.store
    videos = write_videos(run.videos_dir, VIDEOS, seconds_per_scene=SECONDS_PER_SCENE)
    ids = sorted(videos)
    frames_per_video = 2 * round(SECONDS_PER_SCENE * 10)
    expected = {v: expected_timestamps_ms(frames_per_video, 10, 1.0) for v in ids}
    first, second = ids[: VIDEOS // 2], ids[VIDEOS // 2 :]
    leaving = run.start_process("a")
    await run.upload({v: videos[v] for v in first})
    await _wait_states(store, ids, [leaving], done=1)

    joining = run.start_process("b")
    await joining.wait_healthy()
    await asyncio.sleep(config.kafka.session_timeout_ms / 1000 + 2)  # the group rebalances
    await run.upload({v: videos[v] for v in second})
    await _wait_states(store, second, [leaving, joining], running=1)
    at_leave = await read_statuses(store, ids)
    left_with = sum(1 for s in at_leave.values() if s.status is VideoState.DONE)
    assert await asyncio.to_thread(leaving.stop) == 0, leaving.log_tail()
    assert left_with < VIDEOS, "nothing was left for the remaining process"

    statuses = await run.wait_final(ids, timeout_s=240)
    assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
    await run.receiver.wait_for_videos(ids, timeout_s=30)
    assert await asyncio.to_thread(joining.stop) == 0, joining.log_tail()

    report = await verify(
        config=config, expected=expected, store=store, hooks=run.receiver.requests
    )
    assert report["failures"] == [], report
    assert report["videos_done"] == VIDEOS
    assert report["duplicate_rows"] == 0
    assert report["duplicate_webhook_ids"] == 0
    assert report["uncommitted_records"] == 0
