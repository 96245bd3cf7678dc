"""Samples a process tree from outside: resident memory (summed over the tree, Ray workers
included), the tree's CPU time, and the whole machine's CPU busy fraction."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field

import psutil


@dataclass
class Sample:
    t: float  # time.time()
    rss_mb: float  # summed over the tree
    tree_cpu_s: float  # cumulative CPU of every process of the tree seen so far
    machine_busy: float  # machine CPU busy fraction since the previous sample (0..1)
    processes: int
    cpu_by_name: dict[str, float] = field(default_factory=dict)  # cumulative, per process name
    sampler_cpu_s: float = 0.0  # cumulative CPU of the thread that took the samples


@dataclass
class TreeSampler:
    """Run as a context manager around a child process; ``samples`` fill every ``period_s``."""

    pid: int
    period_s: float = 0.25
    # Finding the tree's members and their titles reads /proc for every process of the machine:
    # done this often only, so that sampling takes little from what it measures (with the
    # streaming service's 20 processes: 3.6% of a core when done at every sample, 1.5% so).
    discover_s: float = 2.0
    samples: list[Sample] = field(default_factory=list)
    pids: set[int] = field(default_factory=set)  # every process of the tree ever seen

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tree-sampler", daemon=True)
        self._cpu_by_pid: dict[int, float] = {}
        self._name_of: dict[int, str] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._members: list[psutil.Process] = []
        self._discovered = float("-inf")

    def __enter__(self) -> TreeSampler:
        self._last_times = psutil.cpu_times()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def _tree(self) -> list[psutil.Process]:
        try:
            root = self._procs.setdefault(self.pid, psutil.Process(self.pid))
            members = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        # Reuse Process objects: cpu_times of a known pid then needs no new lookup.
        return [self._procs.setdefault(p.pid, p) for p in members]

    def sample(self) -> None:
        rss = 0
        rediscover = time.monotonic() - self._discovered >= self.discover_s
        if rediscover:
            self._members = self._tree()
            self._discovered = time.monotonic()
        tree = self._members
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    # A Ray worker takes its actor's title once given one: asked again.
                    if rediscover or proc.pid not in self._name_of:
                        self._name_of[proc.pid] = _label(proc)
                self._cpu_by_pid[proc.pid] = times.user + times.system
                self.pids.add(proc.pid)
        times = psutil.cpu_times()
        busy = _busy(self._last_times, times)
        self._last_times = times
        by_name: dict[str, float] = {}
        for pid, cpu in self._cpu_by_pid.items():
            name = self._name_of.get(pid, "?")
            by_name[name] = by_name.get(name, 0.0) + cpu
        self.samples.append(
            Sample(
                t=time.time(),
                rss_mb=rss / 2**20,
                tree_cpu_s=sum(self._cpu_by_pid.values()),
                machine_busy=busy,
                processes=len(tree),
                cpu_by_name=by_name,
                sampler_cpu_s=time.thread_time(),
            )
        )

    def peak_rss_mb(self, start: float | None = None, end: float | None = None) -> float:
        chosen = [
            s.rss_mb
            for s in self.samples
            if (start is None or s.t >= start) and (end is None or s.t <= end)
        ]
        return max(chosen, default=0.0)

    def cpu_between(self, start: float, end: float) -> tuple[float, float]:
        """(tree CPU seconds, machine busy fraction) between two times."""
        first, inside = self._window(start, end)
        if first is None:
            return 0.0, 0.0
        cpu = inside[-1].tree_cpu_s - first.tree_cpu_s
        busy = sum(s.machine_busy for s in inside) / len(inside)
        return cpu, busy

    def cpu_by_name_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per process name (Ray workers by their actor or task) between two
        times, largest first: where the tree's CPU went."""
        first, inside = self._window(start, end)
        if first is None:
            return {}
        spent = {
            name: cpu - first.cpu_by_name.get(name, 0.0)
            for name, cpu in inside[-1].cpu_by_name.items()
        }
        ordered = sorted(spent.items(), key=lambda item: -item[1])
        return {name: round(cpu, 2) for name, cpu in ordered if cpu >= 0.005}

    def sampler_cpu_between(self, start: float, end: float) -> float:
        """CPU seconds the sampling itself took between two times (part of the sampled
        process's own CPU when the sampler runs in it)."""
        first, inside = self._window(start, end)
        return inside[-1].sampler_cpu_s - first.sampler_cpu_s if first is not None else 0.0

    def _window(self, start: float, end: float) -> tuple[Sample | None, list[Sample]]:
        """The last sample before ``start`` (the baseline of cumulative counts; the first
        inside when there is none) and the samples inside; (None, []) when none is inside."""
        inside = [s for s in self.samples if start <= s.t <= end]
        if not inside:
            return None, []
        before = [s for s in self.samples if s.t < start]
        return (before[-1] if before else inside[0]), inside

    def kill_leftovers(self) -> int:
        """Kill, by PID, processes of the tree still alive (Ray workers left behind)."""
        killed = 0
        for pid in self.pids:
            proc = self._procs.get(pid)
            if proc is None or pid == os.getpid():
                continue
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                if proc.is_running():
                    proc.kill()
                    killed += 1
        return killed


def _label(proc: psutil.Process) -> str:
    """A Ray worker's title names its actor (``ray::ServeReplica:app:ocr``); others their
    executable, and for Python the module run with ``-m``."""
    try:
        cmdline: list[str] = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return str(proc.name())
    if cmdline and cmdline[0].startswith("ray::"):
        return cmdline[0].split(".")[0][:60]
    if "-m" in cmdline[:-1]:
        return f"python -m {cmdline[cmdline.index('-m') + 1]}"
    return str(proc.name())


def _busy(before: psutil._common.scputimes, after: psutil._common.scputimes) -> float:
    idle_fields = ("idle", "iowait")
    total = sum(after) - sum(before)
    if total <= 0:
        return 0.0
    idle = sum(float(getattr(after, f, 0.0)) - float(getattr(before, f, 0.0)) for f in idle_fields)
    return max(0.0, min(1.0, 1.0 - idle / float(total)))
