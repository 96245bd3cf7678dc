"""Connecting to Ray: a local one (embedded default) or an existing cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

import ray

from core.config import ServiceConfig


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
    # Serve's controller loops every 0.1 s by default, a few percent of a core on a small
    # machine; on one machine, reacting within half a second is enough. (Read by the processes
    # that Ray starts from here; an explicit setting wins.)
    os.environ.setdefault("RAY_SERVE_CONTROL_LOOP_INTERVAL_S", "0.5")
    ray.init(
        include_dashboard=False,
        num_cpus=config.ray.num_cpus,
        namespace=config.ray.namespace,
        _temp_dir=tmp,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()  # a local Ray takes its Serve applications with it
        if "reelsense-ray-" in tmp:
            shutil.rmtree(tmp, ignore_errors=True)
