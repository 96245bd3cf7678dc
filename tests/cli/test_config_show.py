"""``reelsense config show``: every setting as the service runs it, with where it came from,
secrets masked; as lines, or as JSON with ``--json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.main import main as cli_main

FILE_TOKEN = "file-token-5bd1f0c2a9e84e77b6f3c1d2e4a5b6c7"
ENV_PASSWORD = "env-password-0d9c8b7a6f5e4d3c"


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "service.yaml"
    sections = {
        "kafka": {"topic": "uploads"},
        "ray": {"num_cpus": 4},
        "api": {"tenant_tokens": {"acme": [FILE_TOKEN]}},
    }
    path.write_text(yaml.safe_dump(sections))
    return path


def test_json_gives_each_settings_value_and_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REELSENSE_KAFKA_GROUP_ID", "from-env")
    monkeypatch.setenv("REELSENSE_REDIS_PASSWORD", ENV_PASSWORD)
    assert cli_main(["config", "show", "--config", str(config_file(tmp_path)), "--json"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    assert shown["kafka.topic"] == {"value": "uploads", "source": "file"}
    assert shown["kafka.group_id"] == {"value": "from-env", "source": "environment"}
    assert shown["kafka.bootstrap"] == {"value": "127.0.0.1:9092", "source": "default"}
    assert shown["kafka.max_in_flight"] == {"value": 5, "source": "profile:per_core"}
    assert shown["ray.decode.min_replicas"] == {"value": 4, "source": "profile:per_core"}
    assert shown["ray.ocr.fuse"] == {"value": True, "source": "profile:per_core"}
    assert shown["api.tenant_tokens"] == {"value": {"acme": ["**********"]}, "source": "file"}
    assert shown["redis.password"] == {"value": "**********", "source": "environment"}
    assert FILE_TOKEN not in out
    assert ENV_PASSWORD not in out


def test_a_setting_the_user_wrote_keeps_its_source_over_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REELSENSE_KAFKA_MAX_IN_FLIGHT", "2")
    assert cli_main(["config", "show", "--config", str(config_file(tmp_path)), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kafka.max_in_flight"] == {"value": 2, "source": "environment"}


def test_the_command_runs_on_its_own_and_prints_a_line_per_setting(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("REELSENSE_")}
    env["REELSENSE_REDIS_PASSWORD"] = ENV_PASSWORD
    command = Path(sys.executable).parent / "reelsense"
    done = subprocess.run(
        [command, "config", "show", "--config", str(config_file(tmp_path))],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "# placement: per_core"
    assert 'kafka.topic = "uploads"  (file)' in lines
    assert 'redis.password = "**********"  (environment)' in lines
    assert "kafka.max_in_flight = 5  (profile:per_core)" in lines
    assert 'kafka.bootstrap = "127.0.0.1:9092"  (default)' in lines
    assert ENV_PASSWORD not in done.stdout + done.stderr
    assert FILE_TOKEN not in done.stdout + done.stderr


def test_a_bad_value_is_named_without_printing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump({"redis": {"password": ["not", FILE_TOKEN]}}))
    assert cli_main(["config", "show", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert "redis.password" not in captured.out
    assert "password" in captured.err
    assert FILE_TOKEN not in captured.err + captured.out
