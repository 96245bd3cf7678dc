"""A video alone split over idle ingest replicas (``runtime.pools.split``), on real Ray Serve:
each replica decodes a range, and the video's results are those of one decoder."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from core.config import PoolSettings, ServiceConfig
from core.records import VideoRef
from devkit.samples import Scene, write_video
from runtime.pools.executor import RayExecutor
from runtime.pools.results import RayResults
from tests.runtime.support import all_done, processor, text_videos
from tests.runtime.test_fused import deployed, fused_config, ingest_calls, process
from tests.stages.media import corrupt_middle

pytestmark = pytest.mark.slow


def two_decoders(config: ServiceConfig, *, split_min_s: float, lance: Path) -> ServiceConfig:
    decode = PoolSettings(num_cpus=0.5, min_replicas=2, max_replicas=2)
    return config.model_copy(
        update={
            "ray": config.ray.model_copy(update={"decode": decode, "split_min_s": split_min_s}),
            "storage": config.storage.model_copy(update={"lance_uri": str(lance)}),
        }
    )


@contextlib.asynccontextmanager
async def pools(
    base: ServiceConfig, root: Path, name: str, *, split_min_s: float
) -> AsyncIterator[tuple[ServiceConfig, RayExecutor, RedisCheckpointStore]]:
    """Two ingest replicas deployed, splitting a video alone unless ``split_min_s`` is 0;
    tables and checkpoints of their own (``name``)."""
    config = two_decoders(base, split_min_s=split_min_s, lance=root / f"lance-{name}")
    store = RedisCheckpointStore(
        config.redis.model_copy(update={"key_prefix": f"{root.name}-{name}"})
    )
    executor = await deployed(config)
    try:
        yield config, executor, store
    finally:
        await executor.close()
        await store.close()


async def whole_then_split(
    base: ServiceConfig, root: Path
) -> AsyncIterator[tuple[str, tuple[ServiceConfig, RayExecutor, RedisCheckpointStore]]]:
    """The pools deployed twice: never splitting ("whole"), then splitting ranges of 2 s."""
    for name, split_min_s in (("whole", 0.0), ("split", 2.0)):
        async with pools(base, root, name, split_min_s=split_min_s) as deployed_pools:
            yield name, deployed_pools


def frames_of(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["frame_index"], r["timestamp_s"], r["ocr_text"], r["keyframe"]) for r in rows]


async def test_a_video_alone_is_decoded_by_every_idle_replica_as_one_decoder_would(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    base = fused_config(tmp_path, redis_url)
    words = ["ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO", "FOXTROT", "GOLF", "HOTEL"]
    scenes = [Scene((word,), 1.5) for word in words]
    source = write_video(tmp_path / "long.mp4", scenes, fps=10, size=(320, 240), gop=10)
    ref = VideoRef("long", source.as_uri())
    results = {}
    async for name, (config, executor, store) in whole_then_split(base, tmp_path):
        before = await ingest_calls("decode")
        _, rows = await process(config, executor, store, ref)
        after = await ingest_calls("decode")
        # Chunks decoded per replica, for this video.
        results[name] = (
            frames_of(rows),
            sorted(after[r] - before.get(r, 0) for r in after),
            len(rows),
        )
    whole, split = results["whole"], results["split"]
    assert split[0] == whole[0]  # the same samples, indexes and texts
    assert split[2] == whole[2] == 24  # 12 s at 2 fps
    assert any("CHARLIE" in frame[2] for frame in split[0])
    # One piece: one replica decoded every chunk (one more call: the end of the stream).
    assert whole[1][0] == 0
    # Split: both replicas decoded chunks, the second fewer (3 of 12): its decoder also
    # decodes the 5.2 s of warm-up ahead of its range, so its range is cut shorter.
    assert split[1][0] >= 3, split[1]


async def test_a_corrupt_range_fails_the_video_as_one_decoder_would(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    base = fused_config(tmp_path, redis_url)
    scenes = [Scene((f"PART {i}",), 1.5) for i in range(8)]
    source = write_video(tmp_path / "broken.mp4", scenes, fps=10, size=(320, 240), gop=10)
    corrupt_middle(source, length=4_000)
    ref = VideoRef("broken", source.as_uri())
    outcomes = {}
    async for name, (config, executor, store) in whole_then_split(base, tmp_path):
        await processor(
            config, executor, RayResults.connect(config), store, max_attempts=1
        ).process(ref)
        status = await store.get(ref.video_id)
        assert status is not None
        outcomes[name] = (status.status, status.error_code)
    assert outcomes["split"] == outcomes["whole"]
    assert outcomes["split"][0] is VideoState.FAILED


async def test_videos_started_at_once_each_go_to_an_ingest_replica_of_their_own(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    """Serve's router counts a call against its replica only once it is sent: two calls routed
    at once found the same counts, and half the time both went to one replica while the other
    idled. Made one after the other, each round's two videos take both replicas."""
    base = fused_config(tmp_path, redis_url)
    async with pools(base, tmp_path, "pairs", split_min_s=0.0) as (config, executor, store):
        for round_ in range(5):  # all five by chance: 1 in 16 when each pair is a coin toss
            pair = text_videos(tmp_path, (f"r{round_}-a", f"r{round_}-b"), seconds=2)
            before = await ingest_calls("decode")
            await asyncio.gather(
                *(
                    processor(config, executor, RayResults.connect(config), store).process(r)
                    for r in pair
                )
            )
            await all_done(store, pair)
            after = await ingest_calls("decode")
            assert len(after) == 2
            assert all(after[r] > before.get(r, 0) for r in after), (round_, before, after)


async def test_videos_in_hand_together_are_not_split(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    """A range after a video's first decodes its warm-up too: with another video waiting for
    a replica, that is work taken from it, and neither video is split."""
    base = fused_config(tmp_path, redis_url)
    words = ["ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO", "FOXTROT", "GOLF", "HOTEL"]
    refs = []
    for name in ("first", "second"):
        scenes = [Scene((f"{name.upper()} {word}",), 1.5) for word in words]
        source = write_video(tmp_path / f"{name}.mp4", scenes, fps=10, size=(320, 240), gop=10)
        refs.append(VideoRef(name, source.as_uri()))
    async with pools(base, tmp_path, "burst", split_min_s=2.0) as (config, executor, store):
        before = await ingest_calls("decode")
        await asyncio.gather(
            *(
                processor(config, executor, RayResults.connect(config), store).process(r)
                for r in refs
            )
        )
        await all_done(store, refs)
        after = await ingest_calls("decode")
    # 12 chunks each and one end per call: a split video would end twice.
    assert sum(after[r] - before.get(r, 0) for r in after) == 2 * (12 + 1)
