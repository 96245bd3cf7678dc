"""The RayService manifest against the replicas the code deploys from the config it names:
the pools as ``deployment_options`` sizes them, and worker groups big enough for each
replica they must host. Builds the Serve applications; deploys nothing."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray._private.ray_constants import DEFAULT_OBJECT_STORE_MEMORY_PROPORTION
from ray.serve import Application, Deployment

from core.config import ServiceConfig
from runtime.pools.application import deployment_options
from runtime.pools.base import INGEST, later_stages
from stages.pipeline import Pipeline
from tests.runtime.test_deploy_config import DEPLOY, SECRET_VARIABLES, rayservice


def serve_applications() -> dict[str, dict[str, Any]]:
    serve_config = yaml.safe_load(rayservice()["spec"]["serveConfigV2"])
    return {app["name"]: app for app in serve_config["applications"]}


def local_config(app: dict[str, Any]) -> Path:
    """The repository file behind an application's ``config`` (the ConfigMap's source)."""
    path = DEPLOY / "config" / Path(app["args"]["config"]).name
    assert path.is_file(), path
    return path


def deployments(app: Application) -> list[Deployment]:
    """The deployments of a built application: its ingress and those bound into it."""
    ingress = app._bound_deployment
    found = [ingress]
    for arg in ingress.init_args:
        if isinstance(arg, Application):
            found += deployments(arg)
    return found


def built(app: dict[str, Any]) -> list[Deployment]:
    """What the application's builder (its ``import_path``) makes of its ``args``."""
    module, _, name = app["import_path"].partition(":")
    builder = getattr(importlib.import_module(module), name)
    return deployments(builder({**app["args"], "config": str(local_config(app))}))


def replicas_of(deployment: Deployment) -> dict[str, Any]:
    autoscaling = deployment._deployment_config.autoscaling_config
    if autoscaling is None:
        return {"num_replicas": deployment.num_replicas}
    return {
        "autoscaling_config": {
            "min_replicas": autoscaling.min_replicas,
            "max_replicas": autoscaling.max_replicas,
            "target_ongoing_requests": autoscaling.target_ongoing_requests,
        }
    }


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRET_VARIABLES.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("secrets")
def test_the_manifest_deploys_the_pools_as_the_code_sizes_them() -> None:
    """``pools_app`` on the file the manifest names gives every pool the options
    ``deployment_options`` makes of its settings, and no ``deployments`` override in
    serveConfigV2 says otherwise."""
    apps = serve_applications()
    config = ServiceConfig.load(local_config(apps["reelsense-pools"]))
    pipeline = Pipeline.from_config(config)
    expected = {INGEST: deployment_options(INGEST, pipeline.decode.resources, config.ray.decode)}
    for name, stage in later_stages(pipeline).items():
        if name not in config.ray.fused:
            expected[name] = deployment_options(name, stage.resources, config.ray.pool(name))
    pools = {d.name: d for d in built(apps["reelsense-pools"])}
    assert set(expected) <= set(pools)
    for name, options in expected.items():
        assert pools[name].ray_actor_options == options["ray_actor_options"], name
        sizing = {k: options[k] for k in ("num_replicas", "autoscaling_config") if k in options}
        assert replicas_of(pools[name]) == sizing, name
    for app in apps.values():
        deployed = {d.name: d for d in built(app)}
        for override in app.get("deployments", []):
            mine = deployed[override["name"]]
            if "ray_actor_options" in override:
                assert override["ray_actor_options"] == mine.ray_actor_options
            for key, value in replicas_of(mine).items():
                assert override.get(key, value) == value, (override["name"], key)


def quantity(value: str | float) -> float:
    """A Kubernetes quantity: ``"16"``, ``"500m"``, ``"64Gi"``."""
    text = str(value)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "G": 1e9, "M": 1e6}
    for unit, factor in units.items():
        if text.endswith(unit):
            return float(text.removesuffix(unit)) * factor
    return float(text)


@pytest.mark.usefixtures("secrets")
def test_every_worker_group_fits_the_largest_replica_it_hosts() -> None:
    """GPU replicas land on a group with GPUs, the others on a CPU group; each must fit one
    pod of it. Ray schedules memory from what the object store (in /dev/shm, counted in the
    container's limit) leaves."""
    cluster = rayservice()["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # hosts no replica
    usable = 1 - DEFAULT_OBJECT_STORE_MEMORY_PROPORTION
    groups = {}
    for group in cluster["workerGroupSpecs"]:
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        groups[group["groupName"]] = {
            "num_cpus": quantity(limits["cpu"]),
            "num_gpus": quantity(limits.get("nvidia.com/gpu", 0)),
            "memory": quantity(limits["memory"]) * usable,
        }
    replicas = [d for app in serve_applications().values() for d in built(app)]
    assert len(replicas) >= 7  # writer, ingest, ocr, embed, vlm, consumers, api
    for replica in replicas:
        wants = {key: replica.ray_actor_options.get(key) or 0 for key in groups["cpu-workers"]}
        hosts = [g for g in groups.values() if bool(g["num_gpus"]) == bool(wants["num_gpus"])]
        assert hosts, replica.name
        for group in hosts:
            assert all(wants[key] <= group[key] for key in wants), (replica.name, wants, group)


def test_the_uploads_topic_has_a_partition_for_every_consumer_replica() -> None:
    app = serve_applications()["reelsense-consumers"]
    kafka = ServiceConfig.load(local_config(app)).kafka
    assert kafka.topic_partitions >= int(app["args"]["replicas"])
    assert kafka.replication_factor == 3  # the README's three brokers
