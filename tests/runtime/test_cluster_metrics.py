"""The pipeline's metrics on a Ray cluster: recorded in a Ray actor, mirrored into Ray's
metrics agent, scraped from the node's metrics export port.

A real ``ray start --head`` on loopback with ``--metrics-export-port``, in a private temp dir
and a process group of its own, stopped by that group. The recording runs in a driver process
of its own, so the Ray this test process may already hold (``ray_session``) stays apart.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from core.config import ServiceConfig
from devkit.services import free_port
from runtime.ray_metrics import RAY_PREFIX, exported_names, mirrored_series, ray_metrics_mirror

ROOT = Path(__file__).resolve().parents[2]

# Runs as a Ray driver: one actor records what a consumer replica records (PipelineMetrics),
# and its metrics poller, wired as the service wires it on a cluster, mirrors them; twice,
# so the second round adds only what grew in between.
DRIVER = """
import asyncio
import sys
import ray

ray.init(address=sys.argv[1], log_to_driver=False)


@ray.remote(num_cpus=0.1)
class Consumer:
    def __init__(self, address):
        from core.config import ServiceConfig
        from runtime.metrics import MetricsPoller, PipelineMetrics
        from runtime.ray_metrics import ray_metrics_mirror

        config = ServiceConfig.load(
            ray={"address": address}, runtime={"instance_id": "consumer-test"}
        )
        mirror = ray_metrics_mirror(config)
        assert mirror is not None, "no mirror on a cluster"
        self.metrics = PipelineMetrics()
        self.poller = MetricsPoller(interval_s=1.0, mirror=mirror)

    def video(self, seconds):
        self.metrics.video_started()
        self.metrics.stage_sent("ocr")
        self.metrics.stage_returned("ocr", 8, 0.3, ok=True)
        self.metrics.video_finished("done", seconds)
        asyncio.run(self.poller.poll_once())
        return self.poller.rounds


consumer = Consumer.remote(sys.argv[1])
assert ray.get(consumer.video.remote(3.0)) == 1
assert ray.get(consumer.video.remote(40.0)) == 2
print("recorded", flush=True)
sys.stdin.read()  # the actor lives (and its metrics are exported) until stdin closes
"""


@dataclass(frozen=True)
class RayHead:
    address: str
    metrics_url: str
    env: dict[str, str]


def _ray_env(temp_dir: str) -> dict[str, str]:
    # Ray's servers listen on every interface: a token of this head's own, for it and its
    # driver (the metrics export port answers without one, as Prometheus expects).
    env = {**os.environ, "RAY_TMPDIR": temp_dir, "RAY_AUTH_MODE": "token"}
    env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # A local service started earlier in this process turns collection off for its own Ray;
    # a Ray address of that one must not send the head or the driver there.
    env.pop("RAY_enable_metrics_collection", None)
    env.pop("RAY_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ray start exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the Ray head did not listen on {port} within {timeout_s} s")


def _stop_group(process: subprocess.Popen[bytes], temp_dir: str) -> None:
    """SIGTERM to the head's process group, SIGKILL to what is left of it after a grace
    period (some of Ray's processes take half a minute, or wait for ever, on SIGTERM); then
    any process still naming this temp dir, by PID."""
    children: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        children = psutil.Process(process.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    psutil.wait_procs(children, timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    for left in psutil.process_iter(["cmdline"]):
        if any(temp_dir in arg for arg in left.info["cmdline"] or ()):
            with contextlib.suppress(psutil.Error):
                left.kill()


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    temp_dir = tempfile.mkdtemp(prefix="rs-m-", dir="/tmp")  # Ray's socket paths stay short
    port, metrics_port = free_port(), free_port()
    env = _ray_env(temp_dir)
    argv = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=1",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        f"--metrics-export-port={metrics_port}",
        # Ports of their own, not Ray's fixed defaults: another Ray may run on this machine.
        f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        "--min-worker-port=0",
        "--max-worker-port=0",
    ]
    with (Path(temp_dir) / "head.log").open("wb") as log:
        head = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_for_port(port, head, timeout_s=60)
        yield RayHead(f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics", env)
    finally:
        _stop_group(head, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def scrape(url: str) -> list[Sample]:
    text = httpx.get(url, timeout=5).text
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The one sample ``name`` whose labels include ``labels``; None when there is none."""
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def test_a_replicas_metrics_reach_the_nodes_export_port(ray_head: RayHead) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, ray_head.address],
        env=ray_head.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == b"recorded"
        done = f"{RAY_PREFIX}reelsense_videos_total"
        mine = {"replica": "consumer-test"}
        samples: list[Sample] = []
        deadline = time.monotonic() + 120  # the agent starts late and exports periodically
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                samples = scrape(ray_head.metrics_url)
                if value(samples, done, outcome="done", **mine) == 2:
                    break
            time.sleep(1)
        assert value(samples, done, outcome="done", **mine) == 2, "not exported in time"
        ray = RAY_PREFIX
        assert value(samples, f"{ray}reelsense_stage_frames_total", stage="ocr", **mine) == 16
        assert value(samples, f"{ray}reelsense_videos_in_flight", **mine) == 0
        seconds = f"{ray}reelsense_video_seconds"
        assert value(samples, f"{seconds}_bucket", le="5.0", **mine) == 1
        assert value(samples, f"{seconds}_bucket", le="60.0", **mine) == 2
        assert value(samples, f"{seconds}_count", **mine) == 2
        assert value(samples, f"{seconds}_sum", **mine) == 43
        latency = f"{ray}reelsense_stage_latency_seconds_count"
        assert value(samples, latency, stage="ocr", **mine) == 2
        # Ray's own labels tell the node and the worker apart.
        ours = [s for s in samples if s.name == done and s.labels.get("replica")]
        assert {"NodeAddress", "WorkerId"} <= set(ours[0].labels)
    finally:
        if driver.stdin is not None:
            driver.stdin.close()
        driver.wait(timeout=60)


def test_the_mirror_copies_totals_values_and_histogram_series() -> None:
    registry = CollectorRegistry()
    counter = Counter("reelsense_t_done", "d", ["outcome"], registry=registry)
    Gauge("reelsense_t_level", "d", registry=registry).set(3)
    Histogram("reelsense_t_seconds", "d", buckets=(1.0,), registry=registry).observe(0.5)
    Gauge("other_level", "not ours", registry=registry).set(1)
    counter.labels("done").inc(2)
    series = {(s.name, s.labels): (s.value, s.counter) for s in mirrored_series(registry)}
    assert series == {
        ("reelsense_t_done_total", (("outcome", "done"),)): (2.0, True),
        ("reelsense_t_level", ()): (3.0, False),
        ("reelsense_t_seconds_bucket", (("le", "1.0"),)): (1.0, False),
        ("reelsense_t_seconds_bucket", (("le", "+Inf"),)): (1.0, False),
        ("reelsense_t_seconds_count", ()): (1.0, False),
        ("reelsense_t_seconds_sum", ()): (0.5, False),
    }
    Counter("reelsense_t_unused", "labelled, nothing recorded", ["x"], registry=registry)
    assert exported_names(registry) == {
        "reelsense_t_done_total",
        "reelsense_t_unused_total",
        "reelsense_t_level",
        "reelsense_t_seconds_bucket",
        "reelsense_t_seconds_sum",
        "reelsense_t_seconds_count",
    }


def test_one_machine_keeps_its_own_endpoint() -> None:
    assert ray_metrics_mirror(ServiceConfig()) is None  # ray.address unset
