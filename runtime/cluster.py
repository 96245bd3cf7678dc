"""Connecting to Ray: a local one (embedded default) or an existing cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

import ray

from core.config import ServiceConfig

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
        ray.init(address=config.ray.address, namespace=config.ray.namespace, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()
        return
    # Ray's socket paths must stay short: a private folder under the system temp dir.
    tmp = os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="reelsense-ray-")
    os.environ["RAY_TMPDIR"] = tmp
    lighten_local_ray()
    ray.init(
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
