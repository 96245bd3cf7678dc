"""Where each setting comes from (``ServiceConfig.load_sourced``, ``core.config_sources``):
an override, the file, the environment or the default, a pool's fields one by one; and what
the placement profile fills, told apart from what the user set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from core.config import PoolSettings, ServiceConfig
from core.config_sources import MASK, public, settings_of
from runtime.placement import place, placed


def write(tmp_path: Path, sections: dict[str, Any]) -> Path:
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(sections))
    return path


def test_each_setting_says_whether_the_file_the_environment_or_the_default_gave_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REELSENSE_KAFKA_GROUP_ID", "from-env")
    monkeypatch.setenv("REELSENSE_KAFKA_TOPIC", "env-loses-to-the-file")
    path = write(tmp_path, {"kafka": {"topic": "from-file"}, "ray": {"num_cpus": 4}})
    config, sources = ServiceConfig.load_sourced(path)
    assert (config.kafka.group_id, sources["kafka.group_id"]) == ("from-env", "environment")
    assert (config.kafka.topic, sources["kafka.topic"]) == ("from-file", "file")
    assert (config.ray.num_cpus, sources["ray.num_cpus"]) == (4, "file")
    assert sources["kafka.bootstrap"] == "default"
    assert sources["ray.ocr.num_cpus"] == "default"
    # Every setting has a source, and loading alone gives the same configuration.
    assert set(sources) == {path for path, _ in settings_of(config)}
    assert config == ServiceConfig.load(path)


def test_a_pools_fields_each_have_their_own_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pydantic-settings merges a pool read from the environment with the file's, field by field.
    monkeypatch.setenv("REELSENSE_RAY_OCR", '{"num_cpus": 2}')
    path = write(tmp_path, {"ray": {"ocr": {"min_replicas": 3, "max_replicas": 3}}})
    config, sources = ServiceConfig.load_sourced(path)
    assert (config.ray.ocr.num_cpus, config.ray.ocr.min_replicas) == (2, 3)
    assert sources["ray.ocr.num_cpus"] == "environment"
    assert sources["ray.ocr.min_replicas"] == "file"
    assert sources["ray.ocr.batch_wait_timeout_s"] == "default"


def test_an_override_replaces_the_files_value_of_its_key_whole(tmp_path: Path) -> None:
    path = write(tmp_path, {"ray": {"ocr": {"num_cpus": 2}, "namespace": "from-file"}})
    config, sources = ServiceConfig.load_sourced(
        path, ray={"ocr": PoolSettings(min_replicas=2)}, kafka={"group_id": "g"}
    )
    assert sources["kafka.group_id"] == "override"
    assert sources["ray.ocr.min_replicas"] == "override"
    assert (config.ray.ocr.num_cpus, sources["ray.ocr.num_cpus"]) == (None, "default")
    assert sources["ray.namespace"] == "file"


def test_the_profile_reports_what_it_filled_and_leaves_the_users_config_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REELSENSE_RUNTIME_VIDEOS_DECODING", "1")
    config, sources = ServiceConfig.load_sourced(ray={"num_cpus": 4})
    before = config.model_dump()
    placement = place(config)
    assert placement.profile == "per_core"
    assert config.model_dump() == before  # a copy was placed
    assert placement.config == placed(config)
    sources |= placement.sources()
    assert (placement.config.kafka.max_in_flight, sources["kafka.max_in_flight"]) == (
        5,
        "profile:per_core",
    )
    assert sources["ray.decode.min_replicas"] == "profile:per_core"
    assert sources["ray.ocr.fuse"] == "profile:per_core"
    assert (placement.config.runtime.videos_decoding, sources["runtime.videos_decoding"]) == (
        1,
        "environment",
    )
    assert sources["ray.num_cpus"] == "override"
    assert sources["ray.vlm.fuse"] == "default"  # no VLM configured: nothing to place


def test_elsewhere_the_profile_fills_nothing() -> None:
    for sections in ({"ray": {"address": "ray://head:10001"}}, {"runtime": {"executor": "local"}}):
        config = ServiceConfig.load(**sections)
        placement = place(config)
        assert placement.config is config
        assert placement.filled == frozenset()
        assert placement.sources() == {}


def test_a_secret_is_shown_masked_wherever_it_sits() -> None:
    value = {"acme": (SecretStr("s3cr3t-token"),), "other": SecretStr("x")}
    assert public(value) == {"acme": [MASK], "other": MASK}
    assert "s3cr3t" not in repr(public(value))
    assert public(None) is None
