"""Every folder the production configuration names is mounted on every Ray pod of the
RayService: any replica may build the pipeline, which reads the model folders for its version
(the consumers read Whisper's at start), so a folder missing from one worker group crash-loops
the replicas placed there. Nothing here needs Kubernetes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import yaml

from tests.runtime.test_deploy_config import DEPLOY, rayservice

PRODUCTION = DEPLOY / "config" / "production.yaml"


def folders(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(setting, value) for every absolute path the configuration file holds."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from folders(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from folders(value, f"{where}[{i}]")
    elif isinstance(node, str) and node.startswith("/"):
        yield where, node


def pods(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = service["spec"]["rayClusterConfig"]
    groups = {group["groupName"]: group for group in cluster["workerGroupSpecs"]}
    return {"head": cluster["headGroupSpec"], **groups}


def unmounted(config: dict[str, Any], service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(pod group, setting, path) for each path no volume of that group's Ray container holds."""
    missing = []
    for group, spec in pods(service).items():
        (container,) = spec["template"]["spec"]["containers"]
        mounted = [PurePosixPath(m["mountPath"]) for m in container.get("volumeMounts", [])]
        volumes = {v["name"] for v in spec["template"]["spec"].get("volumes", [])}
        assert {m["name"] for m in container.get("volumeMounts", [])} <= volumes, group
        for setting, path in folders(config):
            if not any(PurePosixPath(path).is_relative_to(mount) for mount in mounted):
                missing.append((group, setting, path))
    return missing


def test_every_configured_folder_is_mounted_on_every_ray_pod() -> None:
    config = yaml.safe_load(PRODUCTION.read_text())
    assert dict(folders(config))["asr.model_path"].startswith("/models/")
    assert unmounted(config, rayservice()) == []


def test_a_model_folder_mounted_on_the_gpu_workers_alone_is_caught() -> None:
    # The manifests as they were: /models on the GPU workers only, while speech (and so
    # Whisper's folder) runs in the ingest replicas on the CPU workers.
    config = yaml.safe_load(PRODUCTION.read_text())
    before = copy.deepcopy(rayservice())
    for group, spec in pods(before).items():
        if group != "gpu-workers":
            (container,) = spec["template"]["spec"]["containers"]
            container["volumeMounts"] = [
                m for m in container["volumeMounts"] if m["mountPath"] != "/models"
            ]
    missing = {(group, setting) for group, setting, _ in unmounted(config, before)}
    assert ("cpu-workers", "asr.model_path") in missing
    assert ("head", "stages.vlm.model") in missing
    assert not any(group == "gpu-workers" for group, _ in missing)
