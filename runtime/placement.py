"""Placement profiles: how the stage pools are laid out where the user has not said.

- ``per_core``, for a local Ray (one machine, every stage on the same cores): one ingest
  replica per core, the CPU image stages and the embedder fused into it, so that a video goes
  through every CPU stage in the replica that decodes it, as a process per core would run
  it, with no request per chunk and no pixels in the object store. A video alone is split
  into time ranges over the idle replicas (``runtime.pools.split``), where a process pool
  leaves every core but one idle. A VLM keeps its own pool: it is heavy enough to batch, and
  one copy of its weights per core would not fit.
- ``pools``, for a cluster: one pool per stage, each sized and scaled apart (the settings as
  written), so that OCR can get replicas on CPU workers while the VLM has the GPU workers.

``auto`` (the default) is ``per_core`` on a local Ray and ``pools`` with ``ray.address`` set.
A setting the user wrote (YAML, environment or overrides) always wins: a pool with any field
set is left as it is, and so are ``kafka.max_in_flight`` and ``runtime.videos_decoding`` when
set (pydantic records which fields were given: ``model_fields_set``).
"""

from __future__ import annotations

import math
import os
from typing import Literal, TypeVar

from pydantic import BaseModel

from core.config import PoolSettings, ServiceConfig
from core.stage_names import DECODE, FUSABLE, VLM
from runtime.pools.base import later_stages
from stages.pipeline import Pipeline

Profile = Literal["per_core", "pools"]
_Settings = TypeVar("_Settings", bound=BaseModel)

# What the replicas of a local Ray leave to the sink writer and Ray's own actors, per machine.
_RESERVED_CPUS = 0.05


def profile_of(config: ServiceConfig) -> Profile:
    """The profile ``config`` runs under."""
    chosen = config.ray.placement
    if chosen != "auto":
        return chosen
    return "pools" if config.ray.address is not None else "per_core"


def placed(config: ServiceConfig) -> ServiceConfig:
    """``config`` with its profile's settings wherever the user left them unset."""
    if config.runtime.executor != "ray" or profile_of(config) != "per_core":
        return config
    cores = config.ray.num_cpus or os.cpu_count() or 1
    pipeline = Pipeline.from_config(config)
    ray = config.ray
    pools: dict[str, PoolSettings] = {}
    pooled_cpus = 0.0  # what the stages that keep a pool of their own take
    for name, stage in later_stages(pipeline).items():
        pool: PoolSettings = getattr(ray, name)
        if not pool.model_fields_set and name in FUSABLE and name != VLM:
            pools[name] = pool.model_copy(update={"fuse": True})
        elif not pool.fuse:
            cpus = stage.resources.cpus if pool.num_cpus is None else pool.num_cpus
            pooled_cpus += cpus * pool.min_replicas
    if not ray.decode.model_fields_set:
        share = (cores - pooled_cpus - _RESERVED_CPUS) / cores
        pools[DECODE] = ray.decode.model_copy(
            update={
                "min_replicas": cores,
                "max_replicas": cores,
                "num_cpus": max(0.1, math.floor(share * 20) / 20),
            }
        )
    kafka, runtime = config.kafka, config.runtime
    return config.model_copy(
        update={
            "ray": ray.model_copy(update=pools),
            "kafka": _unless_set(kafka, "max_in_flight", cores + 1),
            "runtime": _unless_set(runtime, "videos_decoding", cores),
        }
    )


def _unless_set(settings: _Settings, field: str, value: object) -> _Settings:
    if field in settings.model_fields_set:
        return settings
    return settings.model_copy(update={field: value})
