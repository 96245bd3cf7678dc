"""Stop the service mid-run (SIGTERM, then kill -9), start it again: nothing lost or doubled."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from devkit.receiver import WebhookReceiver
from devkit.services import free_port
from tests.e2e.support import (
    committed_and_end,
    dump_config,
    frame_keys,
    publish,
    service_config,
    upload_record,
    wait_final,
    webhook_secret,
    write_videos,
)

pytestmark = pytest.mark.slow


def _start(config_path: Path, secret: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "REELSENSE_NOTIFY_WEBHOOK_SECRETS": f'["{secret}"]',
        "RAY_TMPDIR": "",  # the service starts its own local Ray in a private folder
    }
    env.pop("RAY_TMPDIR")
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--config", str(config_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """What a crashed pod leaves behind goes too (Ray's own processes)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


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


async def test_sigterm_and_kill9_then_restart(
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
    config_path = dump_config(config, tmp_path / "service.yaml")
    videos = write_videos(tmp_path / "videos", 10, seconds_per_scene=3.0)
    ids = sorted(videos)
    store = RedisCheckpointStore(config.redis)
    log = tmp_path / "service.log"
    process = _start(config_path, secret, log)
    try:
        await publish(
            kafka_bootstrap, config.kafka.topic, [upload_record(v, videos[v]) for v in ids]
        )

        await _wait_progress(store, ids, done_at_least=1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log.read_text()[-3000:]
        _kill_group(process)

        process = _start(config_path, secret, log)
        await _wait_progress(store, ids, done_at_least=4)
        process.kill()  # kill -9 of the service process
        process.wait(timeout=30)
        _kill_group(process)

        process = _start(config_path, secret, log)
        statuses = await wait_final(store, ids, timeout_s=900)
        assert all(s.status is VideoState.DONE for s in statuses.values()), statuses

        keys = frame_keys(Path(config.storage.lance_uri))
        assert not [k for k, n in Counter(keys).items() if n > 1], "duplicate frame rows"
        assert Counter(v for v, _ in keys) == {v: statuses[v].frames for v in ids}

        for _ in range(300):
            delivered = {h.video_id for h in receiver.received if h.type == "video.done"}
            if delivered >= set(ids):
                break
            await asyncio.sleep(0.2)
        per_video: dict[str, set[str]] = {}
        for hook in receiver.received:
            per_video.setdefault(hook.video_id, set()).add(hook.webhook_id)
        assert set(per_video) == set(ids)
        assert all(len(hook_ids) == 1 for hook_ids in per_video.values())

        for _ in range(100):
            committed, ends = await committed_and_end(
                kafka_bootstrap, config.kafka.topic, config.kafka.group_id
            )
            if committed == ends:
                break
            await asyncio.sleep(0.3)
        assert committed == ends
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        _kill_group(process)
        await store.close()
        await receiver.stop()
