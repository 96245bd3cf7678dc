"""The service on a Ray cluster of several nodes: a head, two CPU workers and a worker that
declares a GPU (each a ``ray start`` process on this machine, ``devkit.ray_nodes``).

Where Ray puts the pools is read from Ray's own state API: the VLM pool on the GPU node, the
CPU pools off it. A CPU node lost mid-run (its raylet killed) costs no video, and two service
processes share one deployment of the pools, the survivor finishing the videos of the one
killed. Every check ends with the crash soak's invariants: each video done once in every
sink, one webhook each, every record committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.soak.chaos_verify import expected_timestamps_ms, verify
from checkpoint.base import VideoState, VideoStatus
from core.stage_names import VLM
from devkit.ray_nodes import NodeSpec, RayCluster
from devkit.run_config import service_config, webhook_secret, with_sections
from devkit.service_run import ServiceRun
from devkit.tiny_vlm import build_tiny_qwen2_vl
from devkit.workload import SAMPLE_FPS, write_videos
from runtime.cluster import pools_fingerprint
from runtime.pools.base import INGEST, POOLS_APP, WRITER

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPU_NODE = "gpu"
CPU_NODES = ("cpu-a", "cpu-b")
SECONDS_PER_SCENE = 3.0  # two scenes: 6 s, 6 samples at 1 fps, 3 chunks of 2
# The pools' CPUs: every CPU pool fits on one CPU worker (1 CPU), so losing the other one
# leaves room for all of them. The VLM asks for the GPU and no CPU: only the GPU node, which
# declares no CPU, can take it, and no CPU pool can land there.
POOLS = {
    "decode": {"num_cpus": 0.3},
    "ocr": {"num_cpus": 0.3},
    "embed": {"num_cpus": 0.2},
    "vlm": {"num_cpus": 0, "num_gpus": 1},
}
CPU_POOLS = (INGEST, "ocr", "embed", WRITER)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    nodes = [NodeSpec(name) for name in CPU_NODES]
    nodes.append(NodeSpec(GPU_NODE, num_cpus=0, num_gpus=1, labels={"accelerator": "gpu"}))
    with RayCluster(nodes) as started:
        yield started


@pytest.fixture
async def cluster_run(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, unique: str, cluster: RayCluster
) -> AsyncIterator[ServiceRun]:
    """A run whose service processes join the cluster, each serving its own API (no Serve
    proxy: two processes' HTTP addresses would clash on Serve's one)."""
    async with ServiceRun(
        tmp_path,
        bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        unique=unique,
        process_env=cluster.env,
    ) as run:
        run.configure(
            ray={"address": cluster.address, **POOLS},
            api={"in_service_process": True},
            # A killed process's videos are taken over once its leases lapse.
            runtime={"lease_s": 6.0},
        )
        yield run


def _replicas(cluster: RayCluster) -> dict[str, set[str]]:
    """Pool -> the nodes of its live replicas, as Ray's state API reports them."""
    prefix = f"ServeReplica:{POOLS_APP}:"
    placed: dict[str, set[str]] = {}
    for actor in cluster.list_actors():
        if actor.state == "ALIVE" and actor.class_name.startswith(prefix):
            placed.setdefault(actor.class_name.removeprefix(prefix), set()).add(actor.node_id)
    return placed


async def _wait_placed(
    cluster: RayCluster, condition: Callable[[dict[str, set[str]]], bool], timeout_s: float = 60
) -> dict[str, set[str]]:
    """Until the pools' replicas are placed as ``condition`` wants; returns where they are."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    placed = await asyncio.to_thread(_replicas, cluster)
    while not condition(placed):
        assert loop.time() < deadline, f"not placed so in {timeout_s}s: {placed}"
        await asyncio.sleep(0.5)
        placed = await asyncio.to_thread(_replicas, cluster)
    return placed


def _replica_ids(cluster: RayCluster, pool: str) -> set[str]:
    """Every replica actor the pool has had, live or dead."""
    name = f"ServeReplica:{POOLS_APP}:{pool}"
    return {actor.actor_id for actor in cluster.list_actors() if actor.class_name == name}


async def _credits_nodes(cluster: RayCluster, timeout_s: float = 60) -> set[str]:
    """The nodes of the live chunk-credits actors, once one is live (it is made by the
    first paced call, and its worker process takes a moment to start)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        actors = await asyncio.to_thread(cluster.list_actors)
        credits = [a for a in actors if a.class_name == "ChunkCredits"]
        alive = {a.node_id for a in credits if a.state == "ALIVE"}
        if alive:
            return alive
        assert loop.time() < deadline, [(a.state, a.node_id) for a in credits]
        await asyncio.sleep(0.5)


def _in_flight(status: VideoStatus, owner: str | None = None) -> bool:
    """Running and part-way through (a chunk analysed), under ``owner`` if given."""
    running = status.status is VideoState.RUNNING and bool(status.stages)
    return running and (owner is None or status.owner == owner)


def _expected(ids: list[str]) -> dict[str, list[int]]:
    frames = 2 * round(SECONDS_PER_SCENE * SAMPLE_FPS)
    return {v: expected_timestamps_ms(frames, SAMPLE_FPS, 1.0) for v in ids}


def _assert_clean(report: dict[str, Any], videos: int) -> None:
    assert report["failures"] == [], report
    assert report["videos_done"] == videos
    assert report["duplicate_rows"] == 0
    assert report["missing_rows"] == 0
    assert report["lost_webhooks"] == 0
    assert report["duplicate_webhook_ids"] == 0
    assert report["uncommitted_records"] == 0


async def test_vlm_on_the_gpu_node_and_a_cpu_node_lost_mid_run(
    cluster_run: ServiceRun, cluster: RayCluster, tmp_path: Path
) -> None:
    run = cluster_run
    vlm = build_tiny_qwen2_vl(tmp_path / "tiny-vlm")
    config = run.configure(
        stages={"vlm": {"model": str(vlm), "output": "caption", "max_new_tokens": 4}}
    )
    videos = write_videos(run.videos_dir, 6, seconds_per_scene=SECONDS_PER_SCENE)
    ids = sorted(videos)
    service = run.start_process()
    await service.wait_healthy()

    # Ray's own view: the VLM replica on the node that declares the GPU, the CPU pools on
    # the CPU workers (never on the GPU node, nor on the head, which declares no CPU).
    gpu = cluster.workers[GPU_NODE].node_id
    cpu_nodes = {cluster.workers[name].node_id for name in CPU_NODES}
    placed = _replicas(cluster)
    assert placed["vlm"] == {gpu}, placed
    for pool in CPU_POOLS:
        assert placed[pool], (pool, placed)
        assert placed[pool] <= cpu_nodes, (pool, placed)

    # Lose the CPU node that decodes while videos are part-way through.
    await run.upload(videos)
    await run.wait_until(ids, lambda s: any(_in_flight(v) for v in s.values()))
    # The process's own actor (its chunk credits, made by the first chunk that crosses to
    # the VLM) sits on its node, the head (where a driver on the head's machine attaches):
    # a worker node lost takes none of it.
    assert await _credits_nodes(cluster) == {cluster.head.node_id}
    (lost_id,) = placed[INGEST]
    lost = next(n for n in CPU_NODES if cluster.workers[n].node_id == lost_id)
    await asyncio.to_thread(cluster.workers[lost].kill_raylet)

    statuses = await run.wait_final(ids, timeout_s=300)
    assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
    await run.receiver.wait_for_videos(ids, timeout_s=60)

    # Serve moved what ran there onto the CPU node left; the VLM stayed where it was, and
    # analysed every video's chunks from there (on its CPU: no CUDA here, whatever Ray says).
    (left,) = cpu_nodes - {lost_id}
    placed = await _wait_placed(cluster, lambda p: all(p.get(x) == {left} for x in CPU_POOLS))
    assert placed["vlm"] == {gpu}, placed
    assert all(s.stages[VLM].done == s.chunks_total for s in statuses.values()), statuses

    assert await asyncio.to_thread(service.stop) == 0, service.log_tail()
    report = await verify(
        config=config, expected=_expected(ids), store=run.store, hooks=run.receiver.requests
    )
    _assert_clean(report, len(ids))


async def test_two_processes_share_the_pools_and_one_is_killed(
    cluster_run: ServiceRun, cluster: RayCluster
) -> None:
    run = cluster_run
    videos = write_videos(run.videos_dir, 8, seconds_per_scene=SECONDS_PER_SCENE)
    ids = sorted(videos)
    before = _replica_ids(cluster, INGEST)

    # Both start at once: one deploys the pools, the other waits for them and uses them.
    first, second = run.start_process("a"), run.start_process("b")
    await asyncio.gather(first.wait_healthy(), second.wait_healthy())
    assert len(_replica_ids(cluster, INGEST) - before) == 1, "the pools were deployed twice"

    await run.upload(videos)
    owner_a, owner_b = f"{run.unique}-a", f"{run.unique}-b"
    at_kill = await run.wait_until(
        ids,
        lambda s: (
            any(_in_flight(v, owner_a) for v in s.values())
            and any(v.owner == owner_b for v in s.values())
        ),
    )
    running_on_a = [v for v, s in at_kill.items() if _in_flight(s, owner_a)]
    await asyncio.to_thread(first.kill)  # kill -9 mid-run

    statuses = await run.wait_final(ids, timeout_s=300)
    assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
    # The survivor took the killed one's partitions and finished what it had left part-way
    # (one may have finished in the instant before the kill).
    assert any(statuses[v].owner == owner_b for v in running_on_a), statuses
    await run.receiver.wait_for_videos(ids, timeout_s=60)
    assert await asyncio.to_thread(second.stop) == 0, second.log_tail()

    # The pools are the cluster's: still deployed once both processes are gone.
    assert INGEST in _replicas(cluster)
    report = await verify(
        config=run.config, expected=_expected(ids), store=run.store, hooks=run.receiver.requests
    )
    _assert_clean(report, len(ids))


def test_processes_that_differ_only_in_their_own_settings_share_the_pools(
    tmp_path: Path,
) -> None:
    config = service_config(
        tmp_path,
        bootstrap="127.0.0.1:9092",
        redis_url="redis://127.0.0.1:6379/0",
        unique="u",
        api_port=8000,
        hook_url="http://127.0.0.1:9000/hook",
        secret=webhook_secret(),
    )
    own = with_sections(
        config,
        api={"port": 8001},
        notify={"consumer_name": "b"},
        runtime={"instance_id": "b", "chunks_in_flight": 4},
        kafka={"max_in_flight": 8},
        ray={"address": "127.0.0.1:6380", "namespace": "other"},
    )
    assert pools_fingerprint(own) == pools_fingerprint(config)
    for changed in (
        with_sections(config, stages={"chunk_frames": 4}),
        with_sections(config, ray={"ocr": {"num_cpus": 0.5}}),
        with_sections(config, storage={"lance_uri": str(tmp_path / "elsewhere")}),
        with_sections(config, runtime={"workdir": str(tmp_path / "elsewhere")}),
    ):
        assert pools_fingerprint(changed) != pools_fingerprint(config)
