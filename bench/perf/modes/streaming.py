"""reelsense streaming through Kafka: the embedded stack, the service in this process, events.

    python -m bench.perf.modes.streaming SPEC OUT

Starts Tansu and redis-server, a local Ray, and ``ReelsenseService`` (stage pools on Ray
Serve); processes a warm-up video (models loaded, consumer joined: the service is always on),
then publishes the events of each phase at once and waits until every video is done. A phase
is a group of videos published together: the measured burst, then optionally a video alone
(latency at low load); the memory runs use a 10 s video, a 10 min video and a 200-event burst.

Per video: published at (just before the send), done at (``finished_at`` of its checkpoint).
Each replica's activity comes from the pools themselves (a broadcast), for the timeline.

A setting with ``"nodes": N`` runs the service on a Ray cluster of N one-CPU worker nodes
started on this machine (``devkit.ray_nodes``) instead of one local Ray.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer

from bench.perf.modes.common import (
    Activity,
    ModeResult,
    RunSpec,
    VideoSpec,
    cores,
    mode_main,
    now,
    stage_overrides,
)
from checkpoint.base import VideoState
from consumers.events import VideoUploaded
from core.config import ServiceConfig
from devkit.ray_nodes import NodeSpec, RayCluster
from devkit.stack import EmbeddedStack
from runtime.cluster import ray_connection
from runtime.metrics import sample_values
from runtime.pools.base import POOLS_APP
from runtime.service import ReelsenseService

_FINAL = (VideoState.DONE, VideoState.FAILED)
_POOLS = ("ingest", "ocr", "embed")
_STAGE_POOLS = ("ingest", "ocr", "vlm", "embed")  # the sink writer and the API are not stages
_STAGE_CPU = "reelsense_stage_cpu_seconds_total{"
# Separate pools sized by hand for this 2-core machine (``"placement": "pools"`` settings).
_POOLS_ON_2_CORES: dict[str, dict[str, Any]] = {
    "decode": {"num_cpus": 0.5},
    "ocr": {"num_cpus": 0.5, "max_batch_size": 4},
    "embed": {"num_cpus": 0.2, "max_batch_size": 8},
}


def service_config(spec: RunSpec, stack: EmbeddedStack) -> ServiceConfig:
    setting = spec.setting
    roots = sorted({str(Path(v.path).parent) for v in spec.videos})
    for phase in setting.get("phases", []):
        roots += sorted({str(Path(v["path"]).parent) for v in phase["videos"]})
    if spec.warmup:
        roots.append(str(Path(spec.warmup).parent))
    # Only what a setting names is set: the rest is the service's own (placement profile
    # included: ``runtime.placement``).
    pools = setting.get("pools", {})
    if setting.get("placement") == "pools":  # the pools as they were sized for 2 cores
        pools = {
            name: {**_POOLS_ON_2_CORES.get(name, {}), **pools.get(name, {})}
            for name in {*pools, *_POOLS_ON_2_CORES}
        }
    kafka: dict[str, Any] = {
        "topic": "bench-uploads",
        "group_id": "bench",
        "commit_interval_s": 0.5,
    }
    runtime: dict[str, Any] = {}
    if "max_in_flight" in setting:
        kafka["max_in_flight"] = int(setting["max_in_flight"])
    if "videos_decoding" in setting:
        runtime["videos_decoding"] = int(setting["videos_decoding"])
    base = ServiceConfig.load(
        kafka=kafka,
        limits={"file_roots": tuple(sorted(set(roots)))},
        stages=stage_overrides(
            replace(spec, chunk_frames=setting.get("chunk_frames", spec.chunk_frames)),
            decode_threads=int(setting.get("decode_threads", 1)),
        ),
        ray={
            "num_cpus": int(setting.get("cpus", cores())),
            "placement": setting.get("placement", "auto"),
            **pools,
        },
        storage={k: float(v) for k, v in setting.items() if k == "writer_flush_s"},
        runtime={
            "chunks_in_flight_per_video": int(setting.get("chunks_per_video", 4)),
            "chunks_in_flight": int(setting.get("chunks_in_flight", 16)),
            "decode_ahead_chunks": int(setting.get("decode_ahead", 2)),
            **runtime,
            "chunk_checkpoints": bool(setting.get("chunk_checkpoints", True)),
            "metrics_port": 0,
            "metrics_interval_s": float(setting.get("metrics_interval_s", 2.0)),
        },
    )
    return stack.config(base)


def run(spec: RunSpec) -> ModeResult:
    workdir = Path(spec.workdir)
    nodes = int(spec.setting.get("nodes", 0))
    address = spec.setting.get("address")
    if nodes and address is None:
        return _on_cluster(spec, nodes)
    with EmbeddedStack(workdir / "stack") as stack:
        config = service_config(spec, stack)
        if address is not None:
            # The API from this process, as on one machine: on one-CPU nodes full of ingest
            # replicas, an API replica of its own would wait for a CPU forever.
            ray = config.ray.model_copy(update={"address": address})
            api = config.api.model_copy(update={"in_service_process": True})
            config = config.model_copy(update={"ray": ray, "api": api})
        with ray_connection(config, local=address is None):
            return asyncio.run(_measure(spec, config))


def _on_cluster(spec: RunSpec, nodes: int) -> ModeResult:
    """The mode on a cluster of ``nodes`` one-CPU worker nodes started on this machine (the
    head has none): the same cores, so what differs from one local Ray is what crossing
    raylets costs. The measurement runs in a child process started with the cluster's
    token in its environment (Ray reads it once per process); the cluster's processes and
    the child are both in this process's tree, which the benchmark samples."""
    workers = [NodeSpec(f"cpu-{n}", num_cpus=1) for n in range(nodes)]
    workdir = Path(spec.workdir)
    with RayCluster(workers) as cluster:
        child = replace(spec, setting={**spec.setting, "address": cluster.address})
        spec_path, out_path = workdir / "cluster-spec.json", workdir / "cluster-result.json"
        spec_path.write_text(child.to_json())
        subprocess.run(
            [sys.executable, "-m", "bench.perf.modes.streaming", str(spec_path), str(out_path)],
            env={**os.environ, **cluster.env},
            check=True,
        )
        return ModeResult.read(out_path)


async def _measure(spec: RunSpec, config: ServiceConfig) -> ModeResult:
    started = time.monotonic()
    service = ReelsenseService(config)
    await service.start()
    running = asyncio.create_task(service.run())
    producer = AIOKafkaProducer(bootstrap_servers=config.kafka.bootstrap, acks="all")
    await producer.start()
    try:
        if spec.warmup:
            warm = VideoSpec("warmup", spec.warmup, 0.0)
            await _phase(service, producer, config.kafka.topic, [warm], timeout_s=600)
            await _search_ready(config)
            await asyncio.sleep(config.runtime.metrics_interval_s * 2.5)  # its activity polled
        setup_s = time.monotonic() - started
        phases = [("main", spec.videos)] + [
            (p["name"], [VideoSpec(**v) for v in p["videos"]])
            for p in spec.setting.get("phases", [])
        ]
        results: dict[str, dict[str, Any]] = {}
        for name, videos in phases:
            before = await _scrape(service)
            submitted, done, frames = await _phase(
                service, producer, config.kafka.topic, videos, timeout_s=3600
            )
            await asyncio.sleep(config.runtime.metrics_interval_s * 2.5)  # one more poll round
            after = await _scrape(service)
            results[name] = {
                "submitted": submitted,
                "done": done,
                "frames": frames,
                "start": min(submitted.values()),
                "end": max(done.values()),
                "rebalances": after.get("reelsense_consumer_rebalances_total", 0.0)
                - before.get("reelsense_consumer_rebalances_total", 0.0),
                "metrics": {k: v for k, v in after.items() if _reported(k)},
                "stage_work_cpu_s": {
                    name[len(_STAGE_CPU) :].split('"')[1]: value - before.get(name, 0.0)
                    for name, value in after.items()
                    if name.startswith(_STAGE_CPU)
                },
            }
        timeline = await _activity(service.config.ray.fused)  # as placed
    finally:
        await producer.stop()
        service.request_stop()
        await asyncio.gather(running, return_exceptions=True)
    main = results.pop("main")
    return ModeResult(
        mode=spec.mode,
        setting=dict(spec.setting, phases=[p["name"] for p in spec.setting.get("phases", [])]),
        window_start=main["start"],
        window_end=main["end"],
        submitted=main["submitted"],
        done=main["done"],
        frames=main["frames"],
        setup_s=setup_s,
        stage_processes=[f"ServeReplica:{POOLS_APP}:{pool}" for pool in _STAGE_POOLS],
        timeline=timeline,
        extra={
            "phases": results,
            "rebalances": main["rebalances"],
            "metrics": main["metrics"],
            # A decoder with threads of its own spends CPU the stage thread's time misses.
            "stage_work_cpu_s": (
                main["stage_work_cpu_s"] if int(spec.setting.get("decode_threads", 1)) <= 1 else {}
            ),
            "metrics_url": service.metrics_url,
        },
    )


async def _phase(
    service: ReelsenseService,
    producer: AIOKafkaProducer,
    topic: str,
    videos: list[VideoSpec],
    *,
    timeout_s: float,
) -> tuple[dict[str, float], dict[str, float], int]:
    """Publish one event per video at once; wait until each is done (or failed)."""
    submitted: dict[str, float] = {}
    sends = []
    for video in videos:
        event = VideoUploaded(video_id=video.video_id, uri=Path(video.path).as_uri())
        submitted[video.video_id] = now()
        sends.append(await producer.send(topic, event.to_bytes(), key=video.video_id.encode()))
    await asyncio.gather(*sends)
    done: dict[str, float] = {}
    frames = 0
    deadline = time.monotonic() + timeout_s
    waiting = set(submitted)
    while waiting:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(waiting)} videos not done in {timeout_s:.0f}s")
        for video_id in sorted(waiting):
            status = await service.store.get(video_id)
            if status is None or status.status not in _FINAL:
                continue
            if status.status is VideoState.FAILED:
                raise RuntimeError(
                    f"{video_id} failed: {status.error_code}: {status.error_message}"
                )
            assert status.finished_at is not None
            done[video_id] = status.finished_at.timestamp()
            frames += status.frames
            waiting.discard(video_id)
        # The done time is the checkpoint's own: polling less often only ends the wait later,
        # and costs the measured process less.
        await asyncio.sleep(0.5)
    return submitted, done, frames


async def _search_ready(config: ServiceConfig) -> None:
    """The API loads its search model in the background once it starts: one query waits for
    it, so that the loading is not measured as the pipeline's."""
    url = f"http://{config.api.host}:{config.api.port}/v1/search"
    async with httpx.AsyncClient(timeout=300) as client:
        (await client.get(url, params={"q": "warmup"})).raise_for_status()


async def _scrape(service: ReelsenseService) -> dict[str, float]:
    if service.metrics_url is None:
        return {}
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(service.metrics_url)
    return dict(sample_values(response.text))


def _reported(name: str) -> bool:
    return name.startswith(
        (
            "reelsense_stage_busy_fraction",
            "reelsense_stage_replicas",
            "reelsense_stage_frames_total",
            "reelsense_stage_busy_seconds_total",
            "reelsense_consumer_",
            "reelsense_videos_total",
        )
    )


async def _activity(fused: frozenset[str]) -> list[Activity]:
    """Every replica's working intervals, straight from the pools (a broadcast); a fused
    stage's are in the ingest replicas'."""
    from ray import serve

    timeline: list[Activity] = []
    for pool in (name for name in _POOLS if name not in fused):
        handle = serve.get_deployment_handle(pool, app_name=POOLS_APP)
        for reply in await handle.broadcast("activity").results_async():
            for snap in reply:
                lane = f"{snap.stage}:{snap.replica[:6]}"
                timeline.extend(
                    Activity(lane, snap.stage, start, end, items)
                    for _, start, end, items in snap.intervals
                )
    return timeline


if __name__ == "__main__":
    mode_main(run)
