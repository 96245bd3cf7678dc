"""The files under deploy/ stay true to the code: settings names, Ray version, Serve schema,
the packages the image installs. Nothing here needs Docker or Kubernetes."""

from __future__ import annotations

import json
import logging
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from prometheus_client import Counter, Gauge, Histogram
from pydantic import SecretStr
from ray.serve.schema import ServeDeploySchema

from cli.main import main as cli_main
from core.config import ApiSettings, InsecureConfig, ServiceConfig
from runtime.ray_metrics import RAY_PREFIX, exported_names
from runtime.serve_apps import api_app, consumers_app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SECTIONS = {name.upper(): field.annotation for name, field in ServiceConfig.model_fields.items()}
TOKEN_1, TOKEN_2, TOKEN_3 = (f"token-{n}-" + "x" * 32 for n in (1, 2, 3))
SECRET_VARIABLES = {
    "REELSENSE_REDIS_PASSWORD": "redis-pw",
    "REELSENSE_STORAGE_S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "REELSENSE_STORAGE_S3_SECRET_ACCESS_KEY": "s3-secret",
    "REELSENSE_NOTIFY_WEBHOOK_SECRETS": '["whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ="]',
    "REELSENSE_API_TENANT_TOKENS": json.dumps({"acme": [TOKEN_1, TOKEN_2], "globex": [TOKEN_3]}),
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
    assert config.stages.ocr.threads == int(config.ray.ocr.num_cpus)
    assert config.api.tenant_tokens == {}  # tokens come from the Secret, never from the file


def test_secrets_come_from_the_environment_past_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file wins over the environment, so it must not name any secret field."""
    for name, value in SECRET_VARIABLES.items():
        monkeypatch.setenv(name, value)
    config = ServiceConfig.load(DEPLOY / "config" / "production.yaml")
    assert config.redis.password == SecretStr("redis-pw")
    assert config.storage.s3_secret_access_key == SecretStr("s3-secret")
    assert len(config.notify.webhook_secrets) == 1
    assert config.api.bearer_tokens() == {TOKEN_1: "acme", TOKEN_2: "acme", TOKEN_3: "globex"}
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


def _env_example_tokens() -> dict[str, list[str]]:
    for line in (DEPLOY / "env.example").read_text().splitlines():
        if line.startswith("REELSENSE_API_TENANT_TOKENS="):
            tokens: dict[str, list[str]] = json.loads(line.split("=", 1)[1].strip("'"))
            return tokens
    raise AssertionError("deploy/env.example names no tenant tokens")


@pytest.mark.parametrize(
    ("tokens", "said"),
    [
        ({"acme": []}, "tenant 'acme' has no token"),
        ({"acme": [TOKEN_1], "globex": []}, "tenant 'globex' has no token"),
        ({"acme": [""]}, "shorter than 32"),
        ({"acme": [" " * 40]}, "shorter than 32"),
        ({"acme": [TOKEN_1, "short-token"]}, "shorter than 32"),
        ({"acme": ["change-me-" + "x" * 32]}, "placeholder"),
        (_env_example_tokens(), "tenant .acme."),
    ],
)
def test_weak_tenant_tokens_refuse_to_start(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tokens: dict[str, list[str]],
    said: str,
) -> None:
    """A tenant without a token, an empty, blank or short token, or a placeholder: ``serve``
    exits 2 with ``insecure_config`` (a tenant with no token once turned authentication off
    for every tenant), and no API is built from such settings."""
    for name, value in SECRET_VARIABLES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("REELSENSE_API_TENANT_TOKENS", json.dumps(tokens))
    monkeypatch.setenv("REELSENSE_API_ALLOW_ANONYMOUS", "true")  # allows no weak token
    config = ServiceConfig.load(DEPLOY / "config" / "production.yaml")
    with pytest.raises(InsecureConfig, match=said) as refused:
        config.refuse_left_open()
    assert refused.value.code == "insecure_config"
    with pytest.raises(InsecureConfig):
        config.api.bearer_tokens()
    assert cli_main(["serve", "--config", str(DEPLOY / "config" / "production.yaml")]) == 2
    assert "api.tenant_tokens" in capsys.readouterr().err


def test_a_token_shared_by_two_tenants_is_refused() -> None:
    settings = ApiSettings(
        tenant_tokens={"acme": (SecretStr(TOKEN_1),), "globex": (SecretStr(TOKEN_1),)}
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
    # Every application reads the file the ConfigMap puts on every pod (README: created with
    # --from-file=production.yaml=deploy/config/production.yaml).
    head = rayservice()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in head["containers"][0]["volumeMounts"]}
    config_path = f"{mounts['config']}/production.yaml"
    assert {app.args["config"] for app in schema.applications} == {config_path}


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
    texts = [p.read_text() for p in DEPLOY.rglob("*") if p.is_file() and p.name != ".gitignore"]
    names = {m for text in texts for m in re.findall(r"REELSENSE_[A-Z0-9_]*[A-Z0-9]", text)}
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
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-\w+$", dockerfile, re.MULTILINE)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in patterns}
    copied = set(re.findall(r"^COPY (\w+)/ \1/$", dockerfile, re.MULTILINE))
    assert copied == packages
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {f"!{package}/" for package in packages} <= set(ignore)
    assert re.search(r"--target cpu", dockerfile)
    assert re.search(r'pip install "\.\[vllm\]"', dockerfile)


# -- images ---------------------------------------------------------------------------------

# A release: x.y.z somewhere in the tag (``3.11.14-slim-bookworm``, ``0.1.0-cpu``) or MinIO's
# ``RELEASE.<date>``; never ``latest``, never no tag at all.
RELEASE_TAG = re.compile(r"(^|\D)\d+\.\d+\.\d+|^RELEASE\.\d{4}-\d{2}-\d{2}T")


def dockerfile_images() -> list[str]:
    """The images the Dockerfile's stages start from (ARG defaults filled in; a FROM that
    names an earlier stage is not an image)."""
    text = (DEPLOY / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    stages: set[str] = set()
    images = []
    for source, stage in re.findall(r"^FROM (\S+)(?: AS (\S+))?$", text, re.MULTILINE):
        name = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], source)
        if name not in stages:
            images.append(name)
        stages.add(stage)
    return images


def yaml_images(node: Any) -> list[str]:
    """Every ``image:`` value anywhere in a parsed YAML document."""
    if isinstance(node, dict):
        found = [node["image"]] if isinstance(node.get("image"), str) else []
        return found + [image for value in node.values() for image in yaml_images(value)]
    if isinstance(node, list):
        return [image for item in node for image in yaml_images(item)]
    return []


def test_every_image_is_pinned_to_a_release() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yaml").read_text())
    # An image compose builds from this repository is named by it, not pulled.
    built_here = {s["image"] for s in compose["services"].values() if "build" in s}
    images = dockerfile_images() + [
        image
        for path in (DEPLOY / "docker-compose.yaml", *sorted((DEPLOY / "kuberay").glob("*.yaml")))
        for document in yaml.safe_load_all(path.read_text())
        for image in yaml_images(document)
        if image not in built_here
    ]
    assert len(images) >= 7, images  # python, kafka, redis, minio, mc, two reelsense images
    unpinned = []
    for image in images:
        name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        if not name or tag == "latest" or not RELEASE_TAG.search(tag):
            unpinned.append(image)
    assert unpinned == []


# -- Kubernetes objects and YAML ------------------------------------------------------------


def test_every_kubernetes_object_parses_and_is_named() -> None:
    for path in sorted((DEPLOY / "kuberay").glob("*.yaml")):
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert documents, path
        for document in documents:
            assert isinstance(document.get("apiVersion"), str), path
            assert isinstance(document.get("kind"), str), path
            assert isinstance(document.get("metadata", {}).get("name"), str), path


def test_yamllint_passes_on_every_deploy_file() -> None:
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(file=str(DEPLOY / ".yamllint"))
    paths = sorted({*DEPLOY.rglob("*.yaml"), DEPLOY / ".yamllint"})
    assert len(paths) >= 5
    problems = [
        f"{path.relative_to(ROOT)}:{problem.line}:{problem.column} {problem.message}"
        for path in paths
        for problem in linter.run(path.read_text(), config, str(path))
    ]
    assert problems == []


# -- metrics: scrape config and dashboard ---------------------------------------------------


def ray_pods() -> list[dict[str, Any]]:
    cluster = rayservice()["spec"]["rayClusterConfig"]
    return [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]


def test_every_ray_pod_serves_metrics_where_the_pod_monitor_looks() -> None:
    (monitor,) = yaml.safe_load_all((DEPLOY / "kuberay" / "monitoring.yaml").read_text())
    assert monitor["kind"] == "PodMonitor"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    wanted = monitor["spec"]["selector"]["matchLabels"]
    for group in ray_pods():
        port = int(group["rayStartParams"]["metrics-export-port"])
        template = group["template"]
        labels = {**template["metadata"]["labels"], "ray.io/is-ray-node": "yes"}  # KubeRay's
        assert wanted.items() <= labels.items()
        ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
        assert ports[endpoint["port"]] == port
        assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DEPLOY / "grafana" / "reelsense.json").read_text())
    return loaded


def dashboard_exprs() -> list[str]:
    def panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for item in items for p in (item, *panels(item.get("panels", [])))]

    return [t["expr"] for p in panels(dashboard()["panels"]) for t in p.get("targets", [])]


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    board = dashboard()
    assert board["uid"]
    assert board["title"]
    assert isinstance(board["schemaVersion"], int)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["prefix"]["query"] == RAY_PREFIX  # the cluster's names by default
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert all(t["refId"] and t["expr"] for t in panel["targets"])
    assert all(expr.count("(") == expr.count(")") for expr in dashboard_exprs())


def test_the_dashboard_queries_the_pipeline_metrics_the_code_defines() -> None:
    import runtime.metrics

    queried = {
        name for expr in dashboard_exprs() for name in re.findall(r"reelsense_[a-z0-9_]+", expr)
    }
    assert queried <= exported_names(), queried - exported_names()
    pipeline = {
        family.name
        for metric in vars(runtime.metrics).values()
        if isinstance(metric, Counter | Gauge | Histogram)
        for family in metric.describe()
    }
    shown = {name.removesuffix("_total") for name in queried} | {
        name.rsplit("_", 1)[0] for name in queried if name.endswith(("_bucket", "_sum", "_count"))
    }
    assert pipeline <= shown, f"no panel for {sorted(pipeline - shown)}"
