"""How much of a core each core is worth when every core is busy: the host's parallel scaling.

    python -m bench.perf.hostscale [--rounds 60]

The bottleneck bound takes n cores to do n times the work of one. A virtual machine need not
give that: its cores may share physical cores, caches and memory bandwidth with other tenants,
and clocks drop as more cores run. A fixed CPU kernel (frame-sized arrays: converts, scales,
sorts; no BLAS, so one thread each) runs alone, then once per core at the same moment; the
scaling is the kernel's CPU time alone over its mean CPU time alongside the others (1.0: the
cores are independent; 0.9: each busy core does 10% less). Measured just before each benchmark
mode, it tells how much of that mode's stage-cost inflation the host put there.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import time
from multiprocessing.synchronize import Barrier
from typing import Any

from bench.perf.modes.common import cores as count_cores

_FRAME = (720, 1280, 3)


def _kernel(rounds: int) -> float:
    """CPU seconds of a fixed amount of frame-like work in this process."""
    import numpy as np

    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, _FRAME, dtype=np.uint8)
    started = time.process_time()
    for _ in range(rounds):
        scaled = frame.astype(np.float32) * 0.5 + 3.0
        np.sort(scaled[::3, ::2].ravel())
        np.clip(scaled, 0, 255).astype(np.uint8)
    return time.process_time() - started


def _worker(barrier: Barrier, rounds: int, results: Any) -> None:
    barrier.wait()
    results.put(_kernel(rounds))


def measure(rounds: int = 60, cores: int | None = None) -> dict[str, Any]:
    """The kernel alone, then on ``cores`` processes at once (default: every core here)."""
    count = cores or count_cores()
    alone = min(_kernel(rounds) for _ in range(2))  # the faster of two: a quiet moment
    # Fresh interpreters: a child forked from a process with threads (gRPC's, OpenMP's) can
    # wait forever on a lock one of them held at the fork.
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(count)
    results = context.Queue()
    workers = [
        context.Process(target=_worker, args=(barrier, rounds, results)) for _ in range(count)
    ]
    for worker in workers:
        worker.start()
    try:
        together = [results.get(timeout=120) for _ in workers]
    except queue.Empty:  # a worker died or hung: no figure rather than no benchmark
        together = []
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    mean = sum(together) / len(together) if together else 0.0
    return {
        "cores": count,
        "alone_cpu_s": round(alone, 4),
        "together_cpu_s": [round(t, 4) for t in together],
        "scaling": round(alone / mean, 3) if mean > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    print(json.dumps(measure(args.rounds), indent=2))


if __name__ == "__main__":
    main()
