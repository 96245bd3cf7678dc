"""The pools application: every stage pool and the sink writer, as one Serve application."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.serve import Application

from core.config import PoolSettings, ServiceConfig
from runtime.pools.base import INGEST, WRITER, later_stages
from runtime.pools.ingest import IngestPool
from runtime.pools.model import ModelPool, SinkWriterPool
from stages.base import Resources
from stages.pipeline import Pipeline

_FUSED_MAX_ONGOING = 4096
WRITER_CPUS = 0.05  # the sink writer: it waits on the sinks' I/O


@dataclass(frozen=True)
class PoolDeployment:
    """A stage pool as deployed: the setting that sizes it, what its stage declares, and
    its pool's settings."""

    setting: str
    declared: Resources
    pool: PoolSettings


def pool_deployments(config: ServiceConfig, pipeline: Pipeline) -> dict[str, PoolDeployment]:
    """The stage pools of the pools application: the ingest replicas (decode's pool), then
    each later stage that is not fused into them."""
    ray = config.ray
    pools = {INGEST: PoolDeployment("ray.decode", pipeline.decode.resources, ray.decode)}
    for name, stage in later_stages(pipeline).items():
        if name not in ray.fused:  # else it runs in the ingest replicas
            setting = f"ray.{name}" if ray.has_own_pool(name) else f"ray.pools.{name}"
            pools[name] = PoolDeployment(setting, stage.resources, ray.pool(name))
    return pools


def pools_application(config: ServiceConfig, pipeline: Pipeline | None = None) -> Application:
    """Every stage pool and the sink writer, as the one Serve application ``POOLS_APP``
    (``pipeline``: ``config``'s, where the caller has it built)."""
    pipeline = pipeline or Pipeline.from_config(config)
    config_json = config.to_replica_json()
    deployments = pool_deployments(config, pipeline)
    ingest = deployments.pop(INGEST)
    ingest_options = deployment_options(INGEST, ingest.declared, ingest.pool)
    if config.ray.fused:
        # A decode stream holds its request for a whole video and waits for its chunks to be
        # taken; calls of fused stages routed here (a reused result's stages, an embedder that
        # reads a pooled VLM's captions) are what finish those chunks. Under one cap for both,
        # streams can take every slot and starve the calls for good. Streams stay bounded by
        # the consumers' videos in flight, and Serve spreads them over the replicas.
        ingest_options["max_ongoing_requests"] = _FUSED_MAX_ONGOING
    pools = [serve.deployment(**ingest_options)(IngestPool).bind(config_json)]
    for name, deployment in deployments.items():
        options = deployment_options(name, deployment.declared, deployment.pool)
        pools.append(serve.deployment(**options)(ModelPool).bind(config_json, name))
    writer = serve.deployment(
        name=WRITER,
        num_replicas=1,
        max_ongoing_requests=256,  # every waiting video joins the next commit
        ray_actor_options={"num_cpus": WRITER_CPUS},
    )(SinkWriterPool)
    # The writer is the ingress: one process fewer than a deployment of its own for that.
    return writer.bind(config_json, *pools)


def pool_stages(config: ServiceConfig) -> dict[str, bool]:
    """The stages after decoding that ``pools_application(config)`` runs, each with whether
    it is fused into the ingest replicas (``config.ray.fused``; ``config`` as placed,
    ``runtime.placement.placed``) rather than in a pool of its own."""
    fused = config.ray.fused
    return {name: name in fused for name in later_stages(Pipeline.from_config(config))}


def pool_resources(declared: Resources, pool: PoolSettings) -> Resources:
    """What a pool's replicas get: the stage's declaration, with what the pool sets instead."""
    return Resources(
        cpus=declared.cpus if pool.num_cpus is None else pool.num_cpus,
        gpus=declared.gpus if pool.num_gpus is None else pool.num_gpus,
        memory_mb=declared.memory_mb if pool.memory_mb is None else pool.memory_mb,
    )


def deployment_options(name: str, declared: Resources, pool: PoolSettings) -> dict[str, Any]:
    """The Serve deployment options of a stage's pool."""
    resources = pool_resources(declared, pool)
    memory = resources.memory_mb * 1024 * 1024
    options: dict[str, Any] = {
        "name": name,
        "ray_actor_options": {
            "num_cpus": resources.cpus,
            "num_gpus": resources.gpus,
            **({"memory": memory} if memory else {}),
        },
        "max_ongoing_requests": max(pool.max_batch_size * 2, 4),
    }
    if pool.max_replicas > pool.min_replicas:
        options["autoscaling_config"] = {
            "min_replicas": pool.min_replicas,
            "max_replicas": pool.max_replicas,
            "target_ongoing_requests": pool.max_batch_size,
        }
    else:
        options["num_replicas"] = pool.min_replicas
    return options
