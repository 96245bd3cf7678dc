"""Whether the stage pools fit the Ray cluster, checked before they are deployed.

A pool whose replicas ask for more CPUs or GPUs than the cluster has does not fail: Serve
waits for resources that never come, logs that a replica "has taken more than 30s to be
scheduled" and the service never starts. Here the pools' demand (each replica's resources
times its minimum replicas, as deployed) is set against the nodes before ``serve.run``:

- a replica larger than every node can never be placed: refused, on any cluster;
- pools that need more in all than the cluster has: refused on a Ray this process started
  (nothing will add a node), a warning on a cluster, where an autoscaler may add nodes.

The refusal names each pool's demand and the settings that size it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.config import ServiceConfig
from core.errors import PermanentError
from runtime.pools.application import WRITER_CPUS, pool_deployments, pool_resources
from runtime.pools.base import WRITER
from stages.base import Resources
from stages.pipeline import Pipeline

log = logging.getLogger(__name__)


class PoolsDoNotFit(PermanentError):
    """The stage pools ask for more than the Ray cluster can give."""

    code = "pools_do_not_fit"


@dataclass(frozen=True)
class Demand:
    """One deployment of the pools: where it is sized, its replicas at least, and each one's
    resources."""

    setting: str
    replicas: int
    each: Resources


def pools_demand(config: ServiceConfig, pipeline: Pipeline | None = None) -> dict[str, Demand]:
    """What each deployment of the pools application asks for (``config`` as placed;
    ``pipeline``: its pipeline, where the caller has it built)."""
    deployments = pool_deployments(config, pipeline or Pipeline.from_config(config))
    demand = {
        name: Demand(d.setting, d.pool.min_replicas, pool_resources(d.declared, d.pool))
        for name, d in deployments.items()
    }
    demand[WRITER] = Demand("(fixed)", 1, Resources(cpus=WRITER_CPUS))
    return demand


def fit_problems(
    demand: Mapping[str, Demand], nodes: Sequence[Mapping[str, float]], *, fixed: bool
) -> tuple[list[str], list[str]]:
    """(what refuses the deployment, what only deserves a warning) for pools of ``demand`` on
    ``nodes`` (each node's resources, Ray's names: ``CPU``, ``GPU``); ``fixed``: no node will
    be added (a Ray this process started)."""
    refusals: list[str] = []
    warnings: list[str] = []
    for kind, attribute in (("CPU", "cpus"), ("GPU", "gpus")):
        largest = max((node.get(kind, 0.0) for node in nodes), default=0.0)
        total = sum(node.get(kind, 0.0) for node in nodes)
        asked = {name: getattr(d.each, attribute) * d.replicas for name, d in demand.items()}
        for name, d in demand.items():
            each = getattr(d.each, attribute)
            if each > largest + 1e-9:
                refusals.append(
                    f"{name}: a replica asks {each:g} {kind}s and the largest node has "
                    f"{largest:g} ({d.setting}.num_{attribute})"
                )
        needed = sum(asked.values())
        if needed > total + 1e-9:
            parts = ", ".join(
                f"{name} {value:g} ({demand[name].replicas} × {value / demand[name].replicas:g}, "
                f"{demand[name].setting})"
                for name, value in asked.items()
                if value
            )
            message = (
                f"the stage pools ask {needed:g} {kind}s at their minimum replicas and the "
                f"cluster has {total:g}: {parts}; lower num_{attribute} or min_replicas, fuse "
                f"stages into decode, or add nodes"
            )
            (refusals if fixed else warnings).append(message)
    return refusals, warnings


def check_fit(config: ServiceConfig, pipeline: Pipeline | None = None) -> None:
    """Raise ``PoolsDoNotFit`` where the pools of ``config`` cannot all be placed on the Ray
    cluster this process is connected to (``fit_problems``)."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    demand = pools_demand(config, pipeline)
    refusals, warnings = fit_problems(demand, nodes, fixed=config.ray.address is None)
    for warning in warnings:
        log.warning("%s (an autoscaler may add them)", warning)
    if refusals:
        raise PoolsDoNotFit("; ".join(refusals))
