"""kill -9 when a long video is ~90% through its model stages: the restart computes only the
chunks that were not persisted yet, and the result is the same as an uninterrupted run."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from bench.soak.chaos_verify import expected_timestamps_ms
from checkpoint.base import VideoState, VideoStatus
from checkpoint.redis_store import RedisCheckpointStore
from devkit.samples import Scene, write_video
from devkit.service_run import ServiceRun
from devkit.workload import frame_keys
from tests.consumers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SECONDS = 60
VIDEO_FPS = 10
SAMPLE_FPS = 2.0
CHUNK_FRAMES = 2


def _long_video(folder: Path) -> Path:
    scenes = [
        Scene(
            lines=(f"SECTION {i}", "RESUME TEST"), seconds=SECONDS / 6, background=(240, 240, 235)
        )
        for i in range(6)
    ]
    return write_video(folder / "long.mp4", scenes, fps=VIDEO_FPS, size=(320, 240))


async def _wait_persisted(
    store: RedisCheckpointStore, video_id: str, at_least: int, *, timeout_s: float
) -> VideoStatus:
    """Polls closely so the kill lands before the last chunks finish."""
    deadline = time.monotonic() + timeout_s
    status: VideoStatus | None = None
    while time.monotonic() < deadline:
        status = await store.get(video_id)
        if status is not None:
            assert status.status is not VideoState.DONE, "the video ended before the kill"
            assert status.status is not VideoState.FAILED, status.error_message
            ocr = status.stages.get("ocr")
            if ocr is not None and ocr.done >= at_least and status.chunks_processed >= at_least:
                return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"no progress to {at_least} chunks: {status}")


async def test_restart_computes_only_the_remaining_chunks(service_run: ServiceRun) -> None:
    run = service_run
    config = run.configure(stages={"sample_fps": SAMPLE_FPS, "chunk_frames": CHUNK_FRAMES})
    path = _long_video(run.videos_dir)
    expected = expected_timestamps_ms(SECONDS * VIDEO_FPS, VIDEO_FPS, SAMPLE_FPS)
    total = -(-len(expected) // CHUNK_FRAMES)
    assert total == 60
    service = run.start_process()
    await run.upload({"long": path})
    at_kill = await _wait_persisted(run.store, "long", int(0.9 * total), timeout_s=240)
    await asyncio.to_thread(service.kill)

    service.start()
    final = (await run.wait_final(["long"], timeout_s=240))["long"]
    assert final.status is VideoState.DONE, service.log_tail()

    in_flight = config.runtime.chunks_in_flight_per_video
    print(  # shown with -s, and beside a failure
        f"at the kill: ocr {at_kill.stages['ocr'].done}, persisted {at_kill.chunks_processed}"
        f"; final: processed {final.chunks_processed}, restored {final.chunks_restored}"
        f", total {final.chunks_total}"
    )
    assert final.chunks_total == total
    # Everything persisted before the kill came back from the store, not from the models.
    assert final.chunks_restored >= at_kill.chunks_processed >= 0.85 * total
    # Only chunks in flight at the kill may have been computed twice.
    assert final.chunks_processed - total <= in_flight
    assert final.stages["ocr"].done == total

    keys = frame_keys(Path(config.storage.lance_uri))
    assert Counter(keys) == {("long", t): 1 for t in expected}
    assert final.frames == len(expected)
    # The persisted chunks are removed just after the outcome is recorded (a crash in
    # between only leaves space to reclaim), so the service may still be at it.
    chunks = Path(config.storage.object_store_uri) / "chunks"
    await wait_until(lambda: not list(chunks.rglob("*.json")), timeout_s=30)
