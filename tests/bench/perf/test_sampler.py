"""The benchmark's process-tree sampler: members found as they start, CPU counted per process."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.perf.sampler import TreeSampler

# A parent that starts, after a while, a child that burns one CPU-second, then waits for it.
_PARENT = """
import subprocess, sys, time
time.sleep(0.5)
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0: pass"
subprocess.run([sys.executable, "-c", burn, "burner"], check=True)
time.sleep(0.5)
"""


def test_a_child_started_later_is_found_and_its_cpu_counted() -> None:
    process = subprocess.Popen([sys.executable, "-c", _PARENT])
    started = time.time()
    with TreeSampler(process.pid, period_s=0.05, discover_s=0.3) as sampler:
        assert process.wait(timeout=30) == 0
    ended = time.time()
    assert max(s.processes for s in sampler.samples) == 2  # the child was found
    assert len(sampler.pids) == 2
    cpu, busy = sampler.cpu_between(started, ended)
    # CPU times are cumulative: found late, the child still counts in full (all but what it
    # burned after its last sample).
    assert 0.85 <= cpu <= 2.0
    assert busy > 0
    by_name = sampler.cpu_by_name_between(started, ended)
    assert abs(sum(by_name.values()) - cpu) < 0.05


def test_the_samplers_own_cpu_is_counted_apart() -> None:
    sleeper = "import time; print('up', flush=True); time.sleep(1.5)"
    process = subprocess.Popen([sys.executable, "-c", sleeper], stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline() == b"up\n"  # its start-up CPU spent before the window
    started = time.time()
    with TreeSampler(process.pid, period_s=0.01, discover_s=0.01) as sampler:
        assert process.wait(timeout=30) == 0
    ended = time.time()
    # Sampling every 10 ms reads /proc a hundred times a second: its CPU is the sampler's, in
    # this process, not the sleeping child's.
    sampling = sampler.sampler_cpu_between(started, ended)
    tree, _ = sampler.cpu_between(started, ended)
    assert sampling > 0.0
    assert tree < 0.05
    assert sampler.sampler_cpu_between(ended + 60, ended + 61) == 0.0  # no sample there
