"""Redis losing a video's record again and again (a failover: a restarted primary serving its
older data set until it follows the new one) is an outage of Redis, not the video's fault: it
uses up none of the video's attempts, and the video is done once Redis keeps its record."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from checkpoint.base import Claim, VideoState
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import VideoRef
from runtime.local_executor import LocalExecutor
from runtime.results import LocalResults
from tests.runtime.support import processor, text_videos

LOSSES = 4  # more than the video's attempts


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lost-record")


@pytest.fixture(scope="module")
def config(root: Path, redis_url: str) -> ServiceConfig:
    return ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"lost-{root.name}"},
        storage={"lance_uri": str(root / "lance"), "object_store_uri": str(root / "objects")},
        limits={"file_roots": (str(root),)},
        stages={"sample_fps": 2.0, "chunk_frames": 2},
        runtime={"workdir": str(root / "work"), "executor": "local"},
    )


class ForgetfulRedis(RedisCheckpointStore):
    """A real Redis store whose server loses the video's record right after each of the
    first ``LOSSES`` claims, as a primary does that a failover left behind."""

    def __init__(self, config: ServiceConfig) -> None:
        super().__init__(config.redis)
        self.claims = 0

    async def claim(self, ref: VideoRef, pipeline_version: str, **options: object) -> Claim:
        claim = await super().claim(ref, pipeline_version, **options)  # type: ignore[arg-type]
        self.claims += 1
        if self.claims <= LOSSES:
            await self._redis.delete(self.video_key(ref.video_id))
        return claim


@pytest.fixture
async def forgetful(config: ServiceConfig) -> AsyncIterator[ForgetfulRedis]:
    store = ForgetfulRedis(config)
    yield store
    await store.close()


async def test_a_record_lost_after_every_claim_uses_up_no_attempt(
    root: Path, config: ServiceConfig, forgetful: ForgetfulRedis
) -> None:
    (ref,) = text_videos(root, ["forgotten"], seconds=2)
    executor = LocalExecutor(config)
    results = LocalResults(config)
    try:
        work = processor(
            config, executor, results, forgetful, retry_backoff_s=(0.05,), max_attempts=3
        )
        await work.process(ref)
    finally:
        await results.close()
        await executor.close()
    status = await forgetful.get(ref.video_id)
    assert status is not None
    assert (status.status, status.error_code) == (VideoState.DONE, None)
    assert forgetful.claims == LOSSES + 1
