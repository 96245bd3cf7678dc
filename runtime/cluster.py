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
    stay up for the other consumer processes.
    """
    if ray.is_initialized():
        yield
        return
    if not local:
        _init(address=config.ray.address, namespace=config.ray.namespace, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()
        return
    # Ray's socket paths must stay short: a private folder under the system temp dir.
    tmp = os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="reelsense-ray-")
    os.environ["RAY_TMPDIR"] = tmp
    lighten_local_ray()
    _init(
        include_dashboard=False,
        num_cpus=config.ray.num_cpus,
        namespace=config.ray.namespace,
        _temp_dir=tmp,
        log_to_driver=False,
        configure_logging=False,
    )
    global _ray_ends_with_this_process  # noqa: PLW0603 - one Ray per process
    _ray_ends_with_this_process = True
    try:
        yield
    finally:
        _ray_ends_with_this_process = False
        ray.shutdown()  # a local Ray takes its Serve applications with it
        if "reelsense-ray-" in tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _init(**options: Any) -> None:
    """``ray.init``, keeping this process's own SIGTERM handler.

    A driver's ``ray.init`` installs a handler that exits with the signal's number wherever
    the main thread happens to be; a service asked to stop must drain and stop what it started
    instead (``runtime.stop_signals``). The process's handler is put back, and a SIGTERM that
    came during the init, which Ray's handler turned into ``SystemExit``, is handed to it: the
    caller then finds the stop requested (and leaves the half-started Ray to ``ray.shutdown``).
    """
    if threading.current_thread() is not threading.main_thread():
        ray.init(**options)  # Ray sets no handler outside the main thread
        return
    own = signal.getsignal(signal.SIGTERM)
    interrupted = False
    try:
        ray.init(**options)
    except SystemExit as exc:
        if exc.code != signal.SIGTERM or not callable(own):
            raise
        interrupted = True
    finally:
        if own is not None:  # None: not set from Python, nothing to put back
            signal.signal(signal.SIGTERM, own)
    if interrupted:
        signal.raise_signal(signal.SIGTERM)


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
