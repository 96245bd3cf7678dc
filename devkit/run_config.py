"""The configuration of one throwaway run of the service (a test, a soak): every name made
unique, every folder under one root, timings short enough for a run of minutes."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import yaml

from core.config import ServiceConfig, WebhookSubscription


def webhook_secret() -> str:
    """A fresh Standard Webhooks secret (``whsec_`` and 24 random bytes)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def service_config(
    root: Path,
    *,
    bootstrap: str,
    redis_url: str,
    unique: str,
    api_port: int,
    hook_url: str,
    secret: str,
    executor: str = "ray",
) -> ServiceConfig:
    """Topics, group and key prefix named after ``unique``; Lance, objects, videos and work
    folders under ``root``; webhooks to ``hook_url`` signed with ``secret``."""
    return ServiceConfig.load(
        kafka={
            "bootstrap": bootstrap,
            "topic": f"uploads-{unique}",
            "dead_letter_topic": f"uploads-{unique}.dlq",
            "bulk_topic": f"uploads-{unique}.bulk",
            "status_topic": f"status-{unique}",
            "group_id": f"group-{unique}",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "max_in_flight": 4,
            "commit_interval_s": 0.2,
        },
        redis={"url": redis_url, "key_prefix": f"rs-{unique}"},
        storage={
            "lance_uri": str(root / "lance"),
            "object_store_uri": str(root / "objects"),
        },
        limits={"file_roots": (str(root / "videos"),)},
        stages={"sample_fps": 1.0, "chunk_frames": 2},
        # The labels in the ingest replicas: a pool of their own is one more than the CPUs
        # these runs give Ray hold beside the others (their settings are written out whole,
        # so no placement profile fills them).
        ray={"labels": {"fuse": True}},
        notify={
            "webhook_secrets": (secret,),
            "subscriptions": (WebhookSubscription(url=hook_url),),
            "allow_private_targets": True,
            "retry_schedule_s": (0.2, 0.5, 1.0, 2.0),
        },
        api={"port": api_port, "allow_anonymous": True},  # tests call it without a token
        runtime={"workdir": str(root / "work"), "executor": executor, "retry_backoff_s": (0.2,)},
    )


def with_sections(config: ServiceConfig, **sections: dict[str, object]) -> ServiceConfig:
    """``config`` with some settings of some sections replaced (``runtime={"...": ...}``)."""
    data = {name: getattr(config, name).model_dump() for name in ServiceConfig.model_fields}
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    return ServiceConfig.load(**data)


def dump_config(config: ServiceConfig, path: Path) -> Path:
    """YAML for ``reelsense serve --config``; secrets travel in the environment instead."""
    data = json.loads(config.model_dump_json())
    data["notify"].pop("webhook_secrets", None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path
