"""deploy/make_env.py writes a deploy/.env the compose stack starts with: every key the compose
file requires, each value fresh, and a configuration the service's start-up checks accept
(the example's empty webhook secrets made the service exit and compose restart it forever)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import ServiceConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "make_env.py"


def made_env(*args: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=True
    )
    values = {}
    for line in done.stdout.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert value[:1] == value[-1:] == "'", line
            values[key] = value[1:-1]
    return values


def test_the_env_holds_every_key_compose_requires() -> None:
    env = made_env()
    compose = (ROOT / "deploy" / "docker-compose.yaml").read_text()
    required = set(re.findall(r"\$\{(REELSENSE_[A-Z0-9_]+):\?", compose))
    assert required <= set(env)
    example = (ROOT / "deploy" / "env.example").read_text()
    assert set(re.findall(r"^(REELSENSE_[A-Z0-9_]+)=", example, re.M)) == set(env)


def test_the_service_accepts_what_it_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    env = made_env("--tenant", "acme", "--tenant", "globex")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = ServiceConfig.load()
    assert config.left_open() == []
    assert sorted(config.api.bearer_tokens().values()) == ["acme", "globex"]
    (secret,) = json.loads(env["REELSENSE_NOTIFY_WEBHOOK_SECRETS"])
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert len(env["REELSENSE_STORAGE_S3_SECRET_ACCESS_KEY"]) >= 8  # MinIO's least


def test_every_run_makes_new_values() -> None:
    first, second = made_env(), made_env()
    assert all(first[key] != second[key] for key in first)
