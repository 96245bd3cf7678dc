"""The files under deploy/ stay true to the code: settings names, Ray version, Serve schema,
the packages the image installs. Nothing here needs Docker or Kubernetes."""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from pydantic import SecretStr
from ray.serve.schema import ServeDeploySchema

from cli.main import main as cli_main
from core.config import ApiSettings, InsecureConfig, ServiceConfig
from runtime.serve_apps import api_app, consumers_app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SECTIONS = {name.upper(): field.annotation for name, field in ServiceConfig.model_fields.items()}
SECRET_VARIABLES = {
    "REELSENSE_REDIS_PASSWORD": "redis-pw",
    "REELSENSE_STORAGE_S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "REELSENSE_STORAGE_S3_SECRET_ACCESS_KEY": "s3-secret",
    "REELSENSE_NOTIFY_WEBHOOK_SECRETS": '["whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ="]',
    "REELSENSE_API_TENANT_TOKENS": '{"acme": ["token-1", "token-2"], "globex": ["token-3"]}',
}


def rayservice() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "kuberay" / "rayservice.yaml").read_text())
    return loaded


def test_production_config_loads_with_every_section() -> None:
    path = DEPLOY / "config" / "production.yaml"
    written = yaml.safe_load(path.read_text())
    config = ServiceConfig.load(path)
    assert set(written) == set(ServiceConfig.model_fields)
    assert config.storage.lance_uri.startswith("s3://")
    assert config.runtime.executor == "ray"
    assert config.ray.vlm.num_gpus >= 1
    assert config.stages.ocr_threads == int(config.ray.ocr.num_cpus)
    assert config.api.tenant_tokens == {}  # tokens come from the Secret, never from the file


def test_secrets_come_from_the_environment_past_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file wins over the environment, so it must not name any secret field."""
    for name, value in SECRET_VARIABLES.items():
        monkeypatch.setenv(name, value)
    config = ServiceConfig.load(DEPLOY / "config" / "production.yaml")
    assert config.redis.password == SecretStr("redis-pw")
    assert config.storage.s3_secret_access_key == SecretStr("s3-secret")
    assert len(config.notify.webhook_secrets) == 1
    assert config.api.bearer_tokens() == {
        "token-1": "acme",
        "token-2": "acme",
        "token-3": "globex",
    }
    shown = repr(config)
    assert not any(secret in shown for secret in ("redis-pw", "s3-secret", "token-1", "whsec_"))


def test_serve_refuses_the_production_config_without_its_secrets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No tokens and no webhook secret: ``reelsense serve`` names both and exits 2 before it
    connects to anything (the config's broker, Redis and S3 are not reachable from here)."""
    code = cli_main(["serve", "--config", str(DEPLOY / "config" / "production.yaml")])
    assert code == 2
    err = capsys.readouterr().err
    assert "api.tenant_tokens is empty" in err
    assert "notify.webhook_secrets is empty" in err
    for app in (api_app, consumers_app):
        with pytest.raises(InsecureConfig) as refused:
            app({"config": str(DEPLOY / "config" / "production.yaml")})
        assert refused.value.code == "insecure_config"


def test_open_settings_start_only_when_meant(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in SECRET_VARIABLES.items():
        monkeypatch.setenv(name, value)
    ServiceConfig.load(DEPLOY / "config" / "production.yaml").refuse_left_open()  # all set
    monkeypatch.delenv("REELSENSE_API_TENANT_TOKENS")
    with pytest.raises(InsecureConfig, match=r"api\.tenant_tokens is empty") as refused:
        ServiceConfig.load(DEPLOY / "config" / "production.yaml").refuse_left_open()
    assert "webhook" not in str(refused.value)
    monkeypatch.setenv("REELSENSE_API_ALLOW_ANONYMOUS", "true")
    monkeypatch.setenv("REELSENSE_NOTIFY_WEBHOOK_SECRETS", "[]")
    monkeypatch.setenv("REELSENSE_NOTIFY_ALLOW_UNSIGNED", "true")
    with caplog.at_level(logging.WARNING, logger="core.config"):
        ServiceConfig.load(DEPLOY / "config" / "production.yaml").refuse_left_open()
    said = [r.getMessage() for r in caplog.records]
    assert any("insecure by choice: api.tenant_tokens is empty" in m for m in said), said
    assert any("insecure by choice: notify.webhook_secrets is empty" in m for m in said), said


def test_a_token_shared_by_two_tenants_is_refused() -> None:
    settings = ApiSettings(
        tenant_tokens={"acme": (SecretStr("same"),), "globex": (SecretStr("same"),)}
    )
    with pytest.raises(ValueError, match="two tenants"):
        settings.bearer_tokens()


def test_compose_config_loads() -> None:
    config = ServiceConfig.load(DEPLOY / "config" / "compose.yaml")
    assert config.ray.address is None
    assert config.storage.s3_endpoint_url == "http://minio:9000"
    assert config.api.host == "0.0.0.0"


def test_rayservice_has_head_cpu_and_gpu_groups_with_secret_env() -> None:
    doc = rayservice()
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayService")
    cluster = doc["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray.__version__
    groups = {group["groupName"]: group for group in cluster["workerGroupSpecs"]}
    assert set(groups) == {"cpu-workers", "gpu-workers"}
    gpu_limits = groups["gpu-workers"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu_limits["nvidia.com/gpu"] == "1"
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [
        group["template"]["spec"] for group in groups.values()
    ]
    for pod in pods:
        container = pod["containers"][0]
        assert {"secretRef": {"name": "reelsense-secrets"}} in container["envFrom"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/etc/reelsense"] == "config"
        config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
        assert config_volume["configMap"]["name"] == "reelsense-config"


def test_rayservice_serve_config_is_valid_for_this_ray() -> None:
    serve_config = yaml.safe_load(rayservice()["spec"]["serveConfigV2"])
    schema = ServeDeploySchema.model_validate(serve_config)
    names = {app.name for app in schema.applications}
    assert names == {"reelsense-pools", "reelsense-consumers", "reelsense-api"}
    exposed = [app for app in schema.applications if app.route_prefix is not None]
    assert [app.name for app in exposed] == ["reelsense-api"]
    env = rayservice()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    config_path = next(
        e["value"] for e in env["containers"][0]["env"] if e["name"] == "REELSENSE_CONFIG"
    )
    assert {app.args["config"] for app in schema.applications} == {config_path}
    assert config_path == "/etc/reelsense/production.yaml"


def setting_exists(variable: str) -> bool:
    """REELSENSE_<SECTION>_<FIELD> names a field of that section's settings."""
    rest = variable.removeprefix("REELSENSE_")
    for section, settings in SECTIONS.items():
        if rest.startswith(section + "_"):
            field = rest[len(section) + 1 :].lower()
            assert isinstance(settings, type)
            return field in settings.model_fields  # type: ignore[attr-defined]
    return False


def test_every_reelsense_variable_in_deploy_is_a_setting() -> None:
    # REELSENSE_CONFIG is the config path handed to the Serve applications, not a setting.
    texts = [p.read_text() for p in DEPLOY.rglob("*") if p.is_file() and p.name != ".gitignore"]
    names = {m for text in texts for m in re.findall(r"REELSENSE_[A-Z0-9_]*[A-Z0-9]", text)}
    names -= {"REELSENSE_CONFIG"}
    section_only = {f"REELSENSE_{section}" for section in SECTIONS}
    unknown = sorted(n for n in names - section_only if not setting_exists(n))
    assert names, "the deploy files name no settings at all"
    assert unknown == []
    assert set(SECRET_VARIABLES) <= names


def test_compose_stack_has_kafka_kraft_redis_aof_minio_and_the_service() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text())
    services = compose["services"]
    assert {"kafka", "redis", "minio", "reelsense"} <= set(services)
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
    redis_args = services["redis"]["command"]
    # WAITAOF (7.2+) on an AOF: how the service confirms a final transition before its offset.
    major, minor = (int(n) for n in services["redis"]["image"].split(":")[1].split(".")[:2])
    assert (major, minor) >= (7, 2)
    assert redis_args[redis_args.index("--appendonly") + 1] == "yes"
    assert redis_args[redis_args.index("--appendfsync") + 1] == "everysec"
    assert redis_args[redis_args.index("--maxmemory-policy") + 1] == "noeviction"
    service = services["reelsense"]
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    mounted = {volume.split(":")[1] for volume in service["volumes"]}
    assert any(arg in mounted for arg in service["command"])


def test_dockerfile_copies_every_installed_package() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", dockerfile, re.MULTILINE)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in patterns}
    copied = set(re.findall(r"^COPY (\w+)/ \1/$", dockerfile, re.MULTILINE))
    assert copied == packages
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {f"!{package}/" for package in packages} <= set(ignore)
    assert re.search(r"--target cpu", dockerfile)
    assert re.search(r'pip install "\.\[vllm\]"', dockerfile)
