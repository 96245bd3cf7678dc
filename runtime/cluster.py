"""Connecting to Ray: a local one (embedded default) or an existing cluster; and the stage pools
on a cluster, deployed once for every service process that uses them."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import ray

from core.config import ServiceConfig

log = logging.getLogger(__name__)

# What a local Ray need not do on one machine. Every Ray process has periodic work of its own,
# a tax paid by every replica busy or idle: on 2 cores, a tenth of the machine.
# - Serve's controller loops every 0.1 s; reacting within half a second is enough here.
# - Serve replicas and handles export cached metrics every 0.1 s: once a second.
# - Ray's own metrics, task events and event-loop statistics feed a dashboard and a metrics
#   agent nobody reads on one machine; the service has its own metrics (``/metrics``).
# - The log monitor lists the log folder every 0.1 s while it holds under 1000 files; every
#   5 s finds new workers' logs soon enough (they are not shipped to this process anyway).
# Measured with the service idle on 2 cores: 0.218 -> 0.160 of a core for the first three,
# the log monitor's listing a further 0.008 (1.35% of a core before).
_LOCAL_RAY_ENV = {
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "5",
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    "RAY_enable_metrics_collection": "false",
    "RAY_enable_task_events": "false",
    "RAY_event_stats": "false",
}


_ray_ends_with_this_process = False


def ray_ends_with_this_process() -> bool:
    """Whether the Ray this process uses is a local one it started and will shut down."""
    return _ray_ends_with_this_process


def one_machine_ray_env() -> dict[str, str]:
    """The settings above, for Ray processes started otherwise (the nodes of a cluster run on
    one machine for tests, ``devkit.ray_nodes``)."""
    return dict(_LOCAL_RAY_ENV)


def lighten_local_ray() -> None:
    """Set the process settings above for a Ray started from this process (read by every
    process it starts); a setting already in the environment wins."""
    for name, value in _LOCAL_RAY_ENV.items():
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def ray_connection(config: ServiceConfig, *, local: bool) -> Iterator[None]:
    """Start a local Ray (private temp dir, no dashboard) or join ``config.ray.address``.

    A local Ray is shut down on exit, Serve applications included; on a cluster the stage pools
    stay up for the other consumer processes. Ray is started and shut down by a thread of its
    own (``_RayOwner``).
    """
    if ray.is_initialized():
        yield
        return
    if not local:
        with _RayOwner(
            address=config.ray.address, namespace=config.ray.namespace, log_to_driver=False
        ):
            yield
        return
    # Ray's socket paths must stay short: a private folder under the system temp dir.
    tmp = os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="reelsense-ray-")
    os.environ["RAY_TMPDIR"] = tmp
    lighten_local_ray()
    global _ray_ends_with_this_process  # noqa: PLW0603 - one Ray per process
    try:
        with _RayOwner(
            include_dashboard=False,
            num_cpus=config.ray.num_cpus,
            namespace=config.ray.namespace,
            _temp_dir=tmp,
            log_to_driver=False,
            configure_logging=False,
        ):
            _ray_ends_with_this_process = True
            yield  # a local Ray takes its Serve applications with it
    finally:
        _ray_ends_with_this_process = False
        if "reelsense-ray-" in tmp:
            shutil.rmtree(tmp, ignore_errors=True)


class _RayOwner:
    """``ray.init`` and ``ray.shutdown`` on a thread kept for as long as the connection.

    In the main thread, a driver's ``ray.init`` installs a SIGTERM handler that raises
    ``SystemExit`` wherever the main thread is at that moment, even inside a fork hook, where
    the exit is swallowed and the signal lost with it; outside the main thread Ray installs
    none, and the process's own handling of a stop (``runtime.stop_signals``) stays whole (Ray's
    core worker still puts a crash handler in front of it, which passes a SIGTERM on to the
    process's handler and is moved back behind it once Ray is up). The
    thread lives until the shutdown because Ray's processes are bound to the thread that
    started them (the kernel's parent-death signal follows the thread, not the process).
    """

    # Shutting a local Ray down takes a few seconds; past this the process's exit takes it.
    _SHUTDOWN_WAIT_S = 60.0

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._ready = threading.Event()
        self._release = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._own, name="ray-owner", daemon=True)

    def __enter__(self) -> None:
        self._thread.start()
        try:
            self._ready.wait()
        except BaseException:  # interrupted (Ctrl-C where nothing handles it): Ray goes too
            self.__exit__()
            raise
        if self._failure is not None:
            self._thread.join()
            raise self._failure
        # Ray's core worker installs a crash handler of its own for SIGTERM as it starts, in
        # front of the process's: the process's handler is put back in front.
        own = signal.getsignal(signal.SIGTERM)
        if own is not None:  # None: not set from Python, nothing to put back
            signal.signal(signal.SIGTERM, own)

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._thread.join(timeout=self._SHUTDOWN_WAIT_S)

    def _own(self) -> None:
        worker_log = logging.getLogger("ray._private.worker")
        quiet = _Without("SIGTERM handler is not set")  # as meant: see the class's docstring
        worker_log.addFilter(quiet)
        try:
            ray.init(**self._options)
        except BaseException as exc:  # handed to the caller
            self._failure = exc
            return
        finally:
            worker_log.removeFilter(quiet)
            self._ready.set()
        self._release.wait()
        ray.shutdown()


class _Without(logging.Filter):
    """Drops the log records that begin with ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self._text)


# -- the stage pools on a cluster ----------------------------------------------------------------

#: The named actor that deploys the pools on a cluster, in a namespace of its own: the pools
#: application is the cluster's (one Serve per cluster), whatever the processes' namespace.
POOLS_DEPLOYER = "reelsense-pools-deployer"
# What the pools are built from (``runtime.pools``): the pipeline's stages, what fetching may
# read and where it works, the sinks and the Redis that fences them, the pools' resources.
# The rest is each process's own (its API, webhooks, consumer group, name on the leases):
# processes that differ only there share the pools.
_POOLS_SECTIONS = ("stages", "asr", "limits", "storage", "redis", "ray")
_PROCESS_RAY_SETTINGS = ("address", "namespace", "num_cpus")
# Loading every pool's model can take minutes; a second process waits for the first's deploy.
_DEPLOY_WAIT_S = 900.0


def pools_fingerprint(config: ServiceConfig) -> str:
    """What the pools of ``config`` are built from, as a digest: equal for two processes that
    can share one deployment of them."""
    data = json.loads(config.to_replica_json())  # secrets in: a rotated key needs new pools
    built_from: dict[str, Any] = {name: data[name] for name in _POOLS_SECTIONS}
    for name in _PROCESS_RAY_SETTINGS:
        built_from["ray"].pop(name, None)
    built_from["workdir"] = data["runtime"]["workdir"]
    return hashlib.sha256(json.dumps(built_from, sort_keys=True).encode()).hexdigest()[:16]


@ray.remote(num_cpus=0, max_restarts=-1)
class PoolsDeployer:
    """The one deployer of the pools application on a cluster: a named actor on the head node
    (whose loss ends the cluster anyway), its calls run one at a time.

    Processes that start at once would otherwise both find no pools and both deploy them, and
    a second ``serve.run`` of the same application is not a no-op: Serve gives every
    imperative deployment a new code version, so every replica restarts under the first
    process's videos.
    Here the first call deploys and the next ones find what it deployed. The deploy runs in
    this actor, not in the caller: a caller killed meanwhile leaves no deploy half done.
    """

    def __init__(self) -> None:
        self._deployed: str | None = None  # the fingerprint of what this actor deployed

    def ensure(self, config_json: str, fingerprint: str) -> str:
        """Deploy the pools of the config unless they run already; returns what was done:
        ``found``, ``deployed`` (none ran) or ``replaced`` (pools of another config ran)."""
        from ray import serve
        from ray.serve.schema import ApplicationStatus

        from runtime.pools.base import POOLS_APP
        from runtime.pools.executor import RayExecutor

        app = serve.status().applications.get(POOLS_APP)
        broken = (ApplicationStatus.DEPLOY_FAILED, ApplicationStatus.DELETING)
        if app is not None and self._deployed == fingerprint and app.status not in broken:
            return "found"  # also when unhealthy: Serve replaces lost replicas by itself
        # Not known here (pools of another config, or of this actor before a restart): the
        # caller's config replaces them, as a new version of the service would.
        outcome = "deployed" if app is None else "replaced"
        executor = RayExecutor.deploy(ServiceConfig.model_validate_json(config_json))
        asyncio.run(executor.close())  # its chunk credits serve a caller's videos; none here
        self._deployed = fingerprint
        return outcome


def ensure_pools(config: ServiceConfig) -> str:
    """Make sure the cluster runs the pools of ``config``, deployed once for all the processes
    of that config (see ``PoolsDeployer``); returns once they run, with what was done."""
    deployer = PoolsDeployer.options(  # type: ignore[attr-defined]
        name=POOLS_DEPLOYER,
        namespace=POOLS_DEPLOYER,
        get_if_exists=True,  # processes starting at once get the same actor
        lifetime="detached",
        resources={"node:__internal_head__": 0.001},
    ).remote()
    fingerprint = pools_fingerprint(config)
    outcome: str = ray.get(
        deployer.ensure.remote(config.to_replica_json(), fingerprint), timeout=_DEPLOY_WAIT_S
    )
    if outcome == "replaced":  # processes of the other config now use these pools
        log.warning("stage pools %s replaced those of another config", fingerprint)
    else:
        log.info("stage pools %s: %s", fingerprint, outcome)
    return outcome
