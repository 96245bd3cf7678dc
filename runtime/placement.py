"""Placement profiles: how the stage pools are laid out where the user has not said.

- ``per_core``, for a local Ray (one machine, every stage on the same cores): one ingest
  replica per core, the stages that declare ``Fusion.PER_CORE`` (the CPU image stages and the
  embedder) fused into it, so that a video goes through every CPU stage in the replica that
  decodes it, as a process per core would run it, with no request per chunk and no pixels in
  the object store. A video alone is split into time ranges over the idle replicas
  (``runtime.pools.split``), where a process pool leaves every core but one idle. A VLM keeps
  its own pool (it declares ``Fusion.IF_SET``): it is heavy enough to batch, and one copy of
  its weights per core would not fit.
- ``pools``, for a cluster: one pool per stage, each sized and scaled apart (the settings as
  written), so that OCR can get replicas on CPU workers while the VLM has the GPU workers.

``auto`` (the default) is ``per_core`` on a local Ray and ``pools`` with ``ray.address`` set.
A setting the user wrote (YAML, environment or overrides) always wins: a pool with any field
set is left as it is, and so are ``kafka.max_in_flight`` and ``runtime.videos_decoding`` when
set (pydantic records which fields were given: ``model_fields_set``). ``place`` says which
settings the profile filled, so that ``reelsense config show`` tells them from the user's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel

from core.config import RaySettings, ServiceConfig
from core.config_sources import profile_source
from core.stage_names import DECODE
from runtime.pools.base import later_stages
from stages.base import Fusion
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


@dataclass(frozen=True)
class Placement:
    """A configuration as the service runs it, and which of its settings the profile filled
    (paths such as ``ray.decode.num_cpus``, each one the user left unset)."""

    config: ServiceConfig
    profile: Profile | None  # None: nothing is placed (the local executor)
    filled: frozenset[str] = frozenset()

    def sources(self) -> dict[str, str]:
        """path -> ``profile:<name>`` for each setting the profile filled."""
        if self.profile is None:
            return {}
        # ``ray.pools`` (the pools of stages from other packages) is shown as one setting.
        paths = {"ray.pools" if p.startswith("ray.pools.") else p for p in self.filled}
        return dict.fromkeys(sorted(paths), profile_source(self.profile))


def placed(config: ServiceConfig) -> ServiceConfig:
    """``config`` with its profile's settings wherever the user left them unset."""
    return place(config).config


def place(config: ServiceConfig) -> Placement:
    """``config``'s profile applied to it: a copy with the profile's settings wherever the user
    left them unset, and which those are; ``config`` itself is left as it is."""
    if config.runtime.executor != "ray":
        return Placement(config, None)
    profile = profile_of(config)
    if profile != "per_core":
        return Placement(config, profile)
    cores = config.ray.num_cpus or os.cpu_count() or 1
    pipeline = Pipeline.from_config(config)
    ray = config.ray
    fills: dict[str, dict[str, object]] = {}  # where -> field -> value
    pooled_cpus = 0.0  # what the stages that keep a pool of their own take
    for name, stage in later_stages(pipeline).items():
        pool = ray.pool(name)
        if not pool.model_fields_set and stage.fusion is Fusion.PER_CORE:
            # A stage from another package has its pool in ``ray.pools``.
            fills[f"ray.{name}" if ray.has_own_pool(name) else f"ray.pools.{name}"] = {"fuse": True}
        elif not pool.fuse:
            cpus = stage.resources.cpus if pool.num_cpus is None else pool.num_cpus
            pooled_cpus += cpus * pool.min_replicas
    if not ray.decode.model_fields_set:
        share = (cores - pooled_cpus - _RESERVED_CPUS) / cores
        fills[f"ray.{DECODE}"] = {
            "min_replicas": cores,
            "max_replicas": cores,
            "num_cpus": max(0.1, math.floor(share * 20) / 20),
        }
    if "max_in_flight" not in config.kafka.model_fields_set:
        fills["kafka"] = {"max_in_flight": cores + 1}
    if "videos_decoding" not in config.runtime.model_fields_set:
        fills["runtime"] = {"videos_decoding": cores}
    for where, update in fills.items():
        config = _updated(config, where.split("."), update)
    filled = frozenset(f"{where}.{field}" for where, update in fills.items() for field in update)
    return Placement(config, profile, filled)


def _updated(model: _Settings, path: Sequence[str], update: dict[str, object]) -> _Settings:
    """A copy of ``model`` with ``update`` applied to the model at ``path`` within it; a
    step into ``ray.pools`` takes the named pool's settings (the defaults where unset)."""
    if not path:
        return model.model_copy(update=update)
    head, *rest = path
    if isinstance(model, RaySettings) and head == "pools":
        name, *rest = rest
        pools = {**model.pools, name: _updated(model.pool(name), rest, update)}
        return model.model_copy(update={"pools": pools})
    return model.model_copy(update={head: _updated(getattr(model, head), rest, update)})
