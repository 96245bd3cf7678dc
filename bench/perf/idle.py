"""The idle tax: what the service's processes take from the machine with no video in flight.

    python -m bench.perf.idle [--seconds 60] [--json OUT]

Starts the embedded stack (Tansu, redis-server), a local Ray and ``ReelsenseService`` with its
defaults in this process, processes one short video (every replica and loop started, models
loaded, consumer joined), waits a moment, then samples the process tree for ``--seconds``:
the CPU of each process (Ray workers by their actor), as a fraction of one core. On a busy
machine every one of those CPU-seconds is taken from the stages, so the idle tax bounds what
the service can reach against a plain process pool.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.perf.sampler import TreeSampler
from bench.runs import emit
from checkpoint.base import VideoState
from core.config import ServiceConfig
from devkit.samples import Scene, write_video
from devkit.stack import EmbeddedStack
from devkit.workload import publish, upload_record, wait_final
from runtime.cluster import ray_connection
from runtime.service import ReelsenseService

_WARM_UP = "idle-warmup"
_SETTLE_S = 10.0  # after the warm-up video: its transitions, commits and webhooks are over


async def _warm_up(service: ReelsenseService, config: ServiceConfig, video: Path) -> None:
    await publish(config.kafka.bootstrap, config.kafka.topic, [upload_record(_WARM_UP, video)])
    status = (await wait_final(service.store, [_WARM_UP]))[_WARM_UP]
    if status.status is VideoState.FAILED:
        raise RuntimeError(f"warm-up failed: {status.error_code}: {status.error_message}")


async def _measure(config: ServiceConfig, video: Path, seconds: float) -> dict[str, Any]:
    service = ReelsenseService(config)
    await service.start()
    running = asyncio.create_task(service.run())
    try:
        await _warm_up(service, config, video)
        await asyncio.sleep(_SETTLE_S)
        with TreeSampler(os.getpid(), period_s=1.0) as sampler:
            await asyncio.sleep(2.0)  # the sampler's first look at the tree
            start = time.time()
            await asyncio.sleep(seconds)
            end = time.time()
            await asyncio.sleep(1.5)  # a sample after the window's end
        by_name = sampler.cpu_by_name_between(start, end)
        total, busy = sampler.cpu_between(start, end)
        sampling = sampler.sampler_cpu_between(start, end)
    finally:
        service.request_stop()
        await asyncio.gather(running, return_exceptions=True)
    # The sampler runs in this process: its own CPU is taken out of this process's figure.
    driver = f"python -m {__spec__.name}" if __spec__ else ""
    if driver in by_name:
        by_name[driver] = max(0.0, by_name[driver] - sampling)
    window = end - start
    return {
        "seconds": round(window, 1),
        "cores_of_tree": round((total - sampling) / window, 4),
        "sampler_cores": round(sampling / window, 4),
        "machine_busy": round(busy, 4),
        "cores_by_process": {name: round(cpu / window, 4) for name, cpu in by_name.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reelsense-idle-") as tmp:
        work = Path(tmp)
        video = write_video(work / "warm.mp4", [Scene(("idle",), seconds=4.0)], size=(640, 360))
        with EmbeddedStack(work / "stack") as stack:
            base = ServiceConfig.load(
                limits={"file_roots": (str(work),)}, runtime={"metrics_port": 0}
            )
            config = stack.config(base)
            with ray_connection(config, local=True):
                report = asyncio.run(_measure(config, video, args.seconds))
    emit(report, args.json)


if __name__ == "__main__":
    main()
