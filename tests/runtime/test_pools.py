"""The stage pools on Ray Serve: each item of a batch keeps its own outcome, and a pool's
resources start from its stage's declaration."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import numpy as np
import psutil
import pytest
import ray

from core.config import PoolSettings, ServiceConfig
from core.errors import DependencyUnavailable
from core.records import Chunk, Frame
from devkit.samples import render_frame
from devkit.service_process import replica_among
from models.errors import InvalidImage
from runtime.executor import PooledChunk
from runtime.pools.application import deployment_options
from runtime.pools.base import later_stages
from runtime.pools.errors import PoolUnavailable
from runtime.pools.executor import RayExecutor
from stages.pipeline import Pipeline


def normalise(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def one_frame(video_id: str, image: np.ndarray) -> Chunk:
    return Chunk(video_id, 0, [Frame(index=0, timestamp_s=0.0, image=image)], last=True)


async def ocr_batches(executor: RayExecutor) -> int:
    """Batches the OCR pool has run (one stage call each)."""
    return sum(snapshot.calls for snapshot in (await executor.activity())["ocr"])


@pytest.mark.slow
async def test_one_bad_chunk_fails_alone_in_its_batch(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    # Four chunks of four videos wait for each other and go to the stage as one batch.
    config = ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"pools-{tmp_path.name}"},
        storage={"lance_uri": str(tmp_path / "lance"), "object_store_uri": str(tmp_path / "obj")},
        ray={"ocr": {"max_batch_size": 4, "batch_wait_timeout_s": 10.0}},
        runtime={"workdir": str(tmp_path / "work")},
    )
    executor = await asyncio.to_thread(RayExecutor.deploy, config)
    try:
        chunks = [
            one_frame("video-1", render_frame(["GOOD 1"])),
            one_frame("video-bad", np.zeros((720, 1280), dtype=np.uint8)),  # no colour channels
            one_frame("video-2", render_frame(["GOOD 2"])),
            one_frame("video-3", render_frame(["GOOD 3"])),
        ]
        tickets = [PooledChunk(c.video_id, 0, 1, True, pixels=ray.put(c)) for c in chunks]
        before = await ocr_batches(executor)

        outcomes = await asyncio.gather(
            *(executor.analyse("ocr", ticket) for ticket in tickets), return_exceptions=True
        )

        assert await ocr_batches(executor) - before == 1  # they did share a batch
        failed = outcomes[1]
        assert isinstance(failed, InvalidImage), failed
        assert (failed.code, failed.stage) == ("invalid_image", "ocr")
        read = [outcome for outcome in outcomes if isinstance(outcome, Chunk)]
        assert [chunk.video_id for chunk in read] == ["video-1", "video-2", "video-3"]
        assert [normalise(chunk.frames[0].ocr_text) for chunk in read] == [
            "good1",
            "good2",
            "good3",
        ]
        assert all(frame.image is None for chunk in read for frame in chunk.frames)
    finally:
        await executor.close()


@pytest.mark.slow
async def test_a_replica_that_dies_under_a_call_is_an_outage_not_a_failure(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    """The OCR replica is killed while a chunk waits in its batch: the call raises
    ``PoolUnavailable`` (an outage the processor waits out, using up no attempt), not a Ray
    error that would count against the video."""
    config = ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"pools-{tmp_path.name}"},
        storage={"lance_uri": str(tmp_path / "lance"), "object_store_uri": str(tmp_path / "obj")},
        ray={"ocr": {"max_batch_size": 4, "batch_wait_timeout_s": 30.0}},
        runtime={"workdir": str(tmp_path / "work")},
    )
    executor = await asyncio.to_thread(RayExecutor.deploy, config)
    try:
        chunk = one_frame("video-1", render_frame(["GOOD 1"]))
        ticket = PooledChunk(chunk.video_id, 0, 1, True, pixels=ray.put(chunk))
        waiting = asyncio.create_task(executor.analyse("ocr", ticket))  # alone: waits 30 s
        await asyncio.sleep(2.0)
        [replica] = [
            actor
            for actor in ray.util.list_named_actors(all_namespaces=True)
            if "#ocr#" in actor["name"]
        ]
        ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]))
        with pytest.raises(PoolUnavailable) as lost:
            await asyncio.wait_for(waiting, timeout=60)
        assert lost.value.code == "pool_unavailable"
        assert isinstance(lost.value, DependencyUnavailable)
    finally:
        await executor.close()


def _replica_process(deployment: str) -> psutil.Process:
    """This test process's own replica of ``deployment`` (other test workers run pools of the
    same names under Rays of their own)."""
    found = replica_among(psutil.Process().children(recursive=True), deployment)
    assert found is not None, f"no replica of {deployment}"
    return found


@pytest.mark.slow
async def test_a_replica_that_hangs_fails_the_call_at_its_deadline(
    tmp_path: Path, redis_url: str, serve_apps: None
) -> None:
    """The OCR replica stops answering (SIGSTOP: alive, holding its connections, silent): the
    call ends at ``ray.call_timeout_s`` as ``PoolUnavailable`` (``pool_call_timeout``, an
    outage), never waiting for ever; once the replica runs again, calls are answered."""
    config = ServiceConfig.load(
        redis={"url": redis_url, "key_prefix": f"pools-{tmp_path.name}"},
        storage={"lance_uri": str(tmp_path / "lance"), "object_store_uri": str(tmp_path / "obj")},
        ray={"call_timeout_s": 3.0, "ocr": {"max_batch_size": 1}},
        runtime={"workdir": str(tmp_path / "work")},
    )
    executor = await asyncio.to_thread(RayExecutor.deploy, config)
    chunk = one_frame("video-1", render_frame(["GOOD 1"]))

    def ticket() -> PooledChunk:
        return PooledChunk(chunk.video_id, 0, 1, True, pixels=ray.put(chunk))

    replica = _replica_process("ocr")
    try:
        replica.suspend()
        with pytest.raises(PoolUnavailable) as hung:
            await asyncio.wait_for(executor.analyse("ocr", ticket()), timeout=60)
        assert hung.value.code == "pool_call_timeout"
        replica.resume()
        read = await executor.analyse("ocr", ticket())
        assert normalise(read.frames[0].ocr_text) == "good1"
    finally:
        with contextlib.suppress(psutil.Error):
            replica.resume()
        await executor.close()


def test_pools_start_from_the_stages_declarations(tmp_path: Path) -> None:
    config = ServiceConfig.load(
        stages={"vlm": {"model": str(tmp_path / "any-vlm")}}, runtime={"workdir": str(tmp_path)}
    )
    pipeline = Pipeline.from_config(config)
    stages = {"decode": pipeline.decode, **later_stages(pipeline)}

    granted = {
        name: deployment_options(name, stage.resources, config.ray.pool(name))["ray_actor_options"]
        for name, stage in stages.items()
    }

    # The pools' defaults before stages declared them: nothing changes for a deployment.
    assert granted == {
        "decode": {"num_cpus": 0.5, "num_gpus": 0.0},
        "ocr": {"num_cpus": 0.8, "num_gpus": 0.0},
        "labels": {"num_cpus": 0.2, "num_gpus": 0.0},
        "qr": {"num_cpus": 0.05, "num_gpus": 0.0},
        "fingerprint": {"num_cpus": 0.02, "num_gpus": 0.0},
        "vlm": {"num_cpus": 0.5, "num_gpus": 0.0},
        "embed": {"num_cpus": 0.3, "num_gpus": 0.0},
    }
    # What a pool sets wins; what it leaves unset stays the stage's.
    gpu = PoolSettings(num_gpus=1.0, memory_mb=1024)
    options = deployment_options("vlm", stages["vlm"].resources, gpu)
    assert options["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 1.0, "memory": 1 << 30}
    assert options["name"] == "vlm"


def test_an_image_embedder_gets_a_pool_of_its_own_or_fuses(tmp_path: Path) -> None:
    config = ServiceConfig.load(
        stages={"image_embed": {"model": str(tmp_path / "any-clip")}},
        runtime={"workdir": str(tmp_path)},
        ray={"image_embed": {"num_cpus": 2.0, "max_batch_size": 8}},
    )
    stages = later_stages(Pipeline.from_config(config))
    assert list(stages) == ["ocr", "labels", "qr", "fingerprint", "image_embed", "embed"]
    options = deployment_options(
        "image_embed", stages["image_embed"].resources, config.ray.image_embed
    )
    assert options["ray_actor_options"] == {"num_cpus": 2.0, "num_gpus": 0.0}
    fused = ServiceConfig.load(ray={"image_embed": {"fuse": True}})
    assert fused.ray.fused == frozenset({"image_embed"})
