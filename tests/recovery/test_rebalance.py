"""Two service processes in one consumer group: the second joins mid-run (a rebalance moves
partitions with videos in flight), then the first leaves on SIGTERM. No double effects."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from bench.chaos_verify import expected_timestamps_ms, read_statuses, verify
from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from devkit.receiver import WebhookReceiver
from devkit.services import free_port
from tests.e2e.support import (
    dump_config,
    publish,
    service_config,
    start_service,
    stop_service,
    upload_record,
    wait_final,
    wait_healthy,
    webhook_secret,
    with_sections,
    write_videos,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(350)]

VIDEOS = 10
SECONDS_PER_SCENE = 5.0  # two scenes: 10 s, 10 samples at 1 fps, 5 chunks


async def _wait_states(
    store: RedisCheckpointStore, ids: list[str], *, done: int = 0, running: int = 0
) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        statuses = [await store.get(v) for v in ids]
        states = [s.status for s in statuses if s is not None]
        if states.count(VideoState.DONE) >= done and states.count(VideoState.RUNNING) >= running:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not {done} done and {running} running in time")


async def test_join_and_leave_mid_run(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, unique: str
) -> None:
    secret = webhook_secret()
    receiver = await WebhookReceiver(secret=secret).start()
    config = service_config(
        tmp_path,
        bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        unique=unique,
        api_port=free_port(),
        hook_url=receiver.url,
        secret=secret,
    )
    ports = {name: free_port() for name in ("a", "b")}
    paths = {
        name: dump_config(
            with_sections(config, api={"port": port}, notify={"consumer_name": f"{unique}-{name}"}),
            tmp_path / f"service-{name}.yaml",
        )
        for name, port in ports.items()
    }
    videos = write_videos(tmp_path / "videos", VIDEOS, seconds_per_scene=SECONDS_PER_SCENE)
    ids = sorted(videos)
    frames_per_video = 2 * round(SECONDS_PER_SCENE * 10)
    expected = {v: expected_timestamps_ms(frames_per_video, 10, 1.0) for v in ids}
    store = RedisCheckpointStore(config.redis)
    ray_dirs = {name: Path(f"/tmp/rs-{unique}-{name}") for name in ports}
    logs = {name: tmp_path / f"service-{name}.log" for name in ports}
    processes = {"a": start_service(paths["a"], secret, logs["a"], ray_tmp=ray_dirs["a"])}
    try:
        first, second = ids[: VIDEOS // 2], ids[VIDEOS // 2 :]
        await publish(
            kafka_bootstrap, config.kafka.topic, [upload_record(v, videos[v]) for v in first]
        )
        await _wait_states(store, ids, done=1)

        processes["b"] = start_service(paths["b"], secret, logs["b"], ray_tmp=ray_dirs["b"])
        await wait_healthy(ports["b"])
        await asyncio.sleep(config.kafka.session_timeout_ms / 1000 + 2)  # the group rebalances
        await publish(
            kafka_bootstrap, config.kafka.topic, [upload_record(v, videos[v]) for v in second]
        )
        await _wait_states(store, second, running=1)
        at_leave = await read_statuses(store, ids)
        left_with = sum(1 for s in at_leave.values() if s.status is VideoState.DONE)
        assert stop_service(processes.pop("a"), ray_tmp=ray_dirs["a"]) == 0, logs["a"].read_text()
        assert left_with < VIDEOS, "nothing was left for the remaining process"

        statuses = await wait_final(store, ids, timeout_s=240)
        assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
        for _ in range(150):
            if {h.video_id for h in receiver.received if h.type == "video.done"} >= set(ids):
                break
            await asyncio.sleep(0.2)
        assert stop_service(processes.pop("b"), ray_tmp=ray_dirs["b"]) == 0

        report = await verify(
            config=config, expected=expected, store=store, hooks=receiver.received
        )
        assert report["failures"] == [], report
        assert report["videos_done"] == VIDEOS
        assert report["duplicate_rows"] == 0
        assert report["duplicate_webhook_ids"] == 0
        assert report["uncommitted_records"] == 0
    finally:
        for name, process in processes.items():
            stop_service(process, timeout_s=60, ray_tmp=ray_dirs[name])
        for folder in ray_dirs.values():
            shutil.rmtree(folder, ignore_errors=True)
        await store.close()
        await receiver.stop()
