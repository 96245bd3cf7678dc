"""A Ray cluster of several nodes on this machine: a head and workers, each a ``ray start
--block`` process of its own, stopped by PID.

For what one local Ray cannot show: pools placed by the resources and labels of the nodes
(a VLM pool on the node that declares a GPU, CPU pools elsewhere), a node lost mid-run (kill
its raylet), and several service processes sharing one cluster. The service joins it as it
joins any cluster: ``ray.address`` set to ``RayCluster.address``, with ``RayCluster.env`` in
its environment.

Facts of Ray 2.60 this leans on:

- Ray advertises the machine's own interface address even when told ``--node-ip-address
  127.0.0.1`` (it turns a loopback address into a routable one), and its servers listen on
  every interface: hence a token of its own per cluster (``RAY_AUTH_TOKEN``), passed to
  every node and driver, rather than the shared ``~/.ray/auth_token`` or none.
- Every port a node would take by default (GCS, Ray client server, dashboard, dashboard agent)
  is fixed; on one machine they are all chosen free here, and worker ports left to the OS.
- ``ray start --block`` ends its node's other processes when the raylet dies, and stops them
  on SIGTERM (after a drain, skipped here); what escapes is found by the node's temp folder.
- The state API (``ray.util.state``) is served by the head's dashboard, so the head runs one,
  on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import psutil

from core.errors import RetryableError
from devkit.base import LocalPart
from devkit.service_process import processes_of_ray_folder
from devkit.services import HOST, free_port, wait_for_port
from runtime.cluster import one_machine_ray_env

# A node's object store: the test videos' pixels are a few MB; Ray's default (30% of memory
# per node) would reserve most of the machine's shared memory four times over.
_OBJECT_STORE_BYTES = 200 * 1024 * 1024
# How soon the GCS declares a node dead: a health check every second, dead after three missed
# (Ray's default, 3 s x 5, tolerates a network's hiccups; a node on this machine that stops
# answering is gone).
_HEALTH_CHECKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
# A node stopped here goes with the whole cluster: no node to move its replicas to, so no
# drain (Ray waits up to 30 s on SIGTERM for Serve to move them).
_NO_DRAIN = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


@dataclass(frozen=True)
class NodeSpec:
    """One worker node: its name here, what it declares to the scheduler, its labels."""

    name: str
    num_cpus: int = 1
    num_gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)


class RayNode:
    """One ``ray start --block`` process (a head or a worker) and its temp folder."""

    def __init__(self, name: str, argv: list[str], temp_dir: Path, log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.temp_dir = temp_dir
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._node_id: str | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, env: Mapping[str, str]) -> None:
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self._node_id = None
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - Ray's own CLI, argv built here
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**env, "RAY_TMPDIR": str(self.temp_dir)},
                start_new_session=True,  # its own process group, stopped as one
            )

    def raylet(self) -> psutil.Process | None:
        """The node's raylet, while it runs."""
        if self.process is None:
            return None
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.process.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    if child.name() == "raylet":
                        return child
        return None

    @property
    def node_id(self) -> str:
        """Ray's id of this node (from its raylet's command line; kept once the node is lost)."""
        if self._node_id is None:
            raylet = self.raylet()
            if raylet is None:
                raise RuntimeError(f"node {self.name}: no raylet runs")
            self._node_id = _node_id_of(raylet)
        return self._node_id

    def kill_raylet(self) -> int:
        """kill -9 of the raylet, as when a machine dies; ``ray start --block`` then ends the
        node's other processes and exits. Returns the raylet's PID."""
        raylet = self.raylet()
        if raylet is None:
            raise RuntimeError(f"node {self.name}: no raylet runs")
        self._node_id = self._node_id or _node_id_of(raylet)
        raylet.kill()
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        return int(raylet.pid)

    def terminate(self) -> None:
        """SIGTERM to ``ray start``, which stops the node's processes in order (a second or
        two; the same to the whole process group leaves it draining for half a minute)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def wait(self, timeout_s: float) -> bool:
        """Until the ``ray start`` process has exited; False if it has not in time."""
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill_left_behind(self) -> None:
        """kill -9 of the node's process group and of whatever of its Ray still runs."""
        if self.process is not None and self.process.poll() is None:  # its PID is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        left = processes_of_ray_folder(self.temp_dir)
        for proc in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(left, timeout=10)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


def _node_id_of(raylet: psutil.Process) -> str:
    found = [str(part) for part in raylet.cmdline() if str(part).startswith("--node_id=")]
    if not found:
        raise RuntimeError(f"raylet {raylet.pid} names no node id")
    return found[0].removeprefix("--node_id=")


class RayCluster(LocalPart):
    """A head (``head_cpus`` CPUs, the dashboard on 127.0.0.1) and the ``workers``.

    ``address`` is what a driver passes to ``ray.init`` (the service's ``ray.address``);
    ``env`` is what a driver's environment needs to join (the cluster's token).
    ``node_env`` adds to (or overrides) the nodes' environment, e.g. Ray settings
    (``RAY_enable_metrics_collection``: on one machine the nodes run without Ray's metrics).
    """

    def __init__(
        self,
        workers: Sequence[NodeSpec],
        *,
        head_cpus: int = 0,
        root: Path | None = None,
        start_timeout_s: float = 120.0,
        node_env: Mapping[str, str] | None = None,
    ) -> None:
        # Short: Ray puts its sockets under each node's temp folder.
        self.root = root or Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))
        self._own_root = root is None
        self.port = free_port()
        self.dashboard_port = free_port()
        self.start_timeout_s = start_timeout_s
        self._token = secrets.token_hex(32)
        self.node_env = {**one_machine_ray_env(), **_HEALTH_CHECKS, **_NO_DRAIN, **(node_env or {})}
        self.head = RayNode("head", self._head_argv(head_cpus), *self._folders("head"))
        self.workers = {
            spec.name: RayNode(spec.name, self._worker_argv(spec), *self._folders(spec.name))
            for spec in workers
        }

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{HOST}:{self.dashboard_port}"

    @property
    def env(self) -> dict[str, str]:
        """What a driver's environment needs to join this cluster."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self._token}

    def nodes(self) -> Iterator[RayNode]:
        yield self.head
        yield from self.workers.values()

    def start(self) -> Self:
        """Start the head, then every worker at once; returns once all are registered."""
        env = {**os.environ, **self.node_env, **self.env}
        try:
            self.head.start(env)
            assert self.head.process is not None
            for port in (self.port, self.dashboard_port):
                wait_for_port(port, timeout_s=self.start_timeout_s, process=self.head.process)
            for worker in self.workers.values():
                worker.start(env)
            self._wait_registered()
        except BaseException as exc:
            tails = "\n".join(f"--- {n.name}:\n{n.log_tail()}" for n in self.nodes())
            self.stop()
            if isinstance(exc, RetryableError):
                raise RetryableError(f"the ray cluster did not start: {exc}\n{tails}") from None
            raise
        return self

    def _wait_registered(self) -> None:
        """Until the GCS counts every node alive (the state API answers from it)."""
        deadline = time.monotonic() + self.start_timeout_s
        expected = 1 + len(self.workers)
        alive = 0
        while time.monotonic() < deadline:
            for node in self.nodes():
                if not node.running:
                    raise RetryableError(f"ray node {node.name} exited:\n{node.log_tail()}")
            with contextlib.suppress(Exception):  # the dashboard may not answer yet
                alive = sum(1 for n in self.list_nodes() if n.state == "ALIVE")
                if alive >= expected:
                    return
            time.sleep(0.5)
        raise RetryableError(f"{alive} of {expected} ray nodes alive after {self.start_timeout_s}s")

    def stop(self, *, timeout_s: float = 20.0) -> None:
        """SIGTERM to every node (workers first: the head holds the GCS they report to), then
        kill -9 of whatever is left; the temp folders go. Safe to call twice."""
        for group in (list(self.workers.values()), [self.head]):
            for node in group:
                node.terminate()
            deadline = time.monotonic() + timeout_s
            for node in group:
                node.wait(max(0.0, deadline - time.monotonic()))
        for node in self.nodes():
            node.kill_left_behind()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- Ray's own view: the state API ---------------------------------------------------------

    def list_nodes(self) -> list[Any]:
        """Every node Ray knows of (``ray.util.state.NodeState``), dead ones included."""
        from ray.util.state.common import StateResource

        return self._state(StateResource.NODES)

    def list_actors(self) -> list[Any]:
        """Every actor Ray knows of (``ray.util.state.ActorState``, with ``node_id``)."""
        from ray.util.state.common import StateResource

        return self._state(StateResource.ACTORS)

    def _state(self, resource: Any) -> list[Any]:
        # The client of ``ray.util.state.list_*``, given the cluster's token explicitly: this
        # process need not be a Ray driver (it may be one of another Ray already).
        from ray.util.state.api import StateApiClient
        from ray.util.state.common import ListApiOptions

        client = StateApiClient(
            address=self.dashboard_url,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        options = ListApiOptions(limit=10_000, detail=True)
        return list(client.list(resource, options=options, raise_on_missing_output=False))

    # -- argv ------------------------------------------------------------------------------------

    def _folders(self, name: str) -> tuple[Path, Path]:
        return self.root / name, self.root / f"{name}.log"

    def _common_argv(self, name: str, num_cpus: int) -> list[str]:
        ray = str(Path(sys.executable).with_name("ray"))
        return [
            ray,
            "start",
            "--block",
            "--node-ip-address",
            HOST,
            "--num-cpus",
            str(num_cpus),
            "--temp-dir",
            str(self.root / name),
            "--object-store-memory",
            str(_OBJECT_STORE_BYTES),
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--min-worker-port",
            "0",  # 0 and 0: each worker binds a port the OS picks
            "--max-worker-port",
            "0",
            "--disable-usage-stats",
        ]

    def _head_argv(self, num_cpus: int) -> list[str]:
        return [
            *self._common_argv("head", num_cpus),
            "--head",
            "--port",
            str(self.port),
            "--ray-client-server-port",
            str(free_port()),
            "--include-dashboard",
            "true",
            "--dashboard-host",
            HOST,
            "--dashboard-port",
            str(self.dashboard_port),
        ]

    def _worker_argv(self, spec: NodeSpec) -> list[str]:
        argv = [*self._common_argv(spec.name, spec.num_cpus), "--address", self.address]
        if spec.num_gpus:
            argv += ["--num-gpus", str(spec.num_gpus)]
        if spec.labels:
            argv += ["--labels", ",".join(f"{k}={v}" for k, v in spec.labels.items())]
        return argv
