"""A Redis failover under Sentinel while the service works: the primary is killed with -9 mid
run, Sentinel promotes its replica, the service follows the new primary, and with
``redis.replicas_to_confirm`` 1 no acknowledged final transition is lost: every video ends done,
once, with its webhook. The old primary, started again, comes back as the new one's replica.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.soak.chaos_verify import (
    check_frames,
    check_webhooks,
    expected_timestamps_ms,
    read_statuses,
)
from checkpoint.base import VideoState
from devkit.sentinel_redis import SentinelRedis
from devkit.service_run import ServiceRun
from devkit.workload import write_videos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

VIDEOS = 8
SECONDS_PER_SCENE = 4.0  # two scenes: 8 s, 8 samples at 1 fps


@pytest.fixture
def failover(tmp_path: Path) -> Iterator[SentinelRedis]:
    with SentinelRedis(tmp_path / "redis") as parts:
        yield parts


async def test_a_killed_primary_under_sentinel_loses_no_final_transition(
    service_run: ServiceRun, failover: SentinelRedis
) -> None:
    run = service_run
    await failover.replicating()
    config = run.configure(redis=failover.settings(replicas_to_confirm=1))
    videos = write_videos(run.videos_dir, VIDEOS, seconds_per_scene=SECONDS_PER_SCENE)
    ids = sorted(videos)
    expected = {v: expected_timestamps_ms(2 * round(SECONDS_PER_SCENE * 10), 10, 1.0) for v in ids}
    service = run.start_process()
    await service.wait_healthy()
    await run.upload(videos)

    async def some_done() -> bool:
        states = [s.status for s in (await read_statuses(run.store, ids)).values()]
        return states.count(VideoState.DONE) >= 2

    deadline = time.monotonic() + 240
    while not await some_done():
        assert time.monotonic() < deadline, "no video done"
        await asyncio.sleep(0.2)
    first = await failover.primary_port()
    # kill -9: what it acknowledged without the replica is gone. The promotion is checked as
    # it happens: a second failover later (a starved machine) is Sentinel's to make.
    assert await failover.fail_over() != first

    statuses = await run.wait_final(ids, timeout_s=300)
    assert await run.wait_committed(timeout_s=120), await run.committed_and_end()
    await asyncio.sleep(3)  # deliveries of the last transitions
    assert await asyncio.to_thread(service.stop) == 0, service.log_tail()

    assert {v: s.status for v, s in statuses.items()} == dict.fromkeys(ids, VideoState.DONE)
    frames, rows = check_frames(config.storage.lance_uri, expected)
    assert frames["missing_rows"] == 0, frames
    assert frames["duplicate_rows"] == 0, frames
    assert all(statuses[v].frames == rows[v] for v in ids)
    version = next(iter({s.pipeline_version for s in statuses.values()}))
    hooks = check_webhooks(run.receiver.requests, ids, version)
    assert hooks["lost_webhooks"] == 0, hooks
    assert hooks["duplicate_webhook_ids"] == 0, hooks
    assert hooks["webhooks_with_wrong_id"] == 0, hooks
