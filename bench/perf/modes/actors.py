"""The process-per-core pool run as Ray actors: what Ray itself costs a pool.

    python -m bench.perf.modes.actors SPEC OUT

One plain Ray actor per core (on a local Ray with the service's settings), each running the
sequential runner of ``bench.perf.modes.sequential`` exactly as one of its processes does: models
loaded, then the next video from a shared line-up until none is left, one thread everywhere.
No Serve, no broker, no checkpoints, no chunk crosses a process: the difference from
``sequential_per_core`` is Ray's runtime alone (its GCS, raylet and core worker threads beside
the same stage work), the floor under any design whose stages run in Ray actors on this host.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import ray

from bench.perf.modes import sequential
from bench.perf.modes.common import (
    ModeResult,
    RunSpec,
    cores,
    mode_main,
    quiet_environment,
    start_local_ray,
)

# Each runner's share of a core: whole cores would leave Ray's own actors none.
_RUNNER_CPUS = 0.95


@ray.remote(num_cpus=0)
class _Lineup:
    """The videos' indexes, handed out one at a time, and the start line every runner waits at
    once its models are loaded."""

    def __init__(self, videos: int, runners: int) -> None:
        self._next = iter(range(videos))
        self._runners = runners
        self._arrived = 0
        self._all_ready = asyncio.Event()

    async def ready(self) -> None:
        self._arrived += 1
        if self._arrived >= self._runners:
            self._all_ready.set()
        await self._all_ready.wait()

    async def take(self) -> int | None:
        return next(self._next, None)


@ray.remote(num_cpus=_RUNNER_CPUS)
class _Runner:
    def run(self, spec_json: str, lineup: ray.actor.ActorHandle, lane: str) -> str:
        quiet_environment()
        spec = RunSpec.from_json(spec_json)
        taken = iter(lambda: ray.get(lineup.take.remote()), None)
        videos = (spec.videos[index] for index in taken)
        ready = lambda: ray.get(lineup.ready.remote())  # noqa: E731
        out = Path(spec.workdir) / f"{lane}.json"
        sequential.run(spec, videos, ready=ready, lane=lane).write(out)
        return str(out)


def run(spec: RunSpec) -> ModeResult:
    runners = int(spec.setting.get("processes", cores()))
    started = time.monotonic()
    start_local_ray(spec, cores())
    ray_start_s = time.monotonic() - started
    try:
        lineup = _Lineup.remote(len(spec.videos), runners)  # type: ignore[attr-defined]
        calls = [
            _Runner.remote().run.remote(spec.to_json(), lineup, f"actor-{n}")  # type: ignore[attr-defined]
            for n in range(runners)
        ]
        parts = [ModeResult.read(Path(out)) for out in ray.get(calls)]
    finally:
        ray.shutdown()
    result = sequential.merged(parts)
    result.setup_s += ray_start_s
    return result


if __name__ == "__main__":
    mode_main(run)
