"""Placement profiles (``runtime.placement``): per_core on a local Ray, pools on a cluster, and a
setting the user wrote always wins."""

from __future__ import annotations

from typing import Any

import pytest

from core.config import ServiceConfig
from runtime.placement import placed, profile_of


def load(**sections: Any) -> ServiceConfig:
    return ServiceConfig.load(**{"ray": {"num_cpus": 4}, **sections})


def test_a_local_ray_runs_every_cpu_stage_in_one_replica_per_core() -> None:
    config = placed(load())
    assert profile_of(config) == "per_core"
    decode = config.ray.decode
    assert (decode.min_replicas, decode.max_replicas) == (4, 4)
    # Four replicas and the writer fit the four CPUs Ray was given.
    assert decode.num_cpus is not None
    assert 4 * decode.num_cpus + 0.05 <= 4
    assert decode.num_cpus >= 0.9
    assert config.ray.fused == {
        "ocr",
        "labels",
        "qr",
        "fingerprint",
        "embed",
    }  # the image embedder is off
    assert config.kafka.max_in_flight == 5
    assert config.runtime.videos_decoding == 4


def test_what_the_user_set_wins_over_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REELSENSE_KAFKA_MAX_IN_FLIGHT", "2")
    config = placed(
        load(
            ray={"num_cpus": 4, "ocr": {"min_replicas": 2, "max_replicas": 2}},
            runtime={"videos_decoding": 1},
        )
    )
    assert config.kafka.max_in_flight == 2  # from the environment
    assert config.runtime.videos_decoding == 1
    assert not config.ray.ocr.fuse  # a pool the user sized keeps its pool
    assert config.ray.fused == {"labels", "qr", "fingerprint", "embed"}
    decode = config.ray.decode
    assert decode.num_cpus is not None
    # The OCR pool's two replicas (0.8 CPU each, as the stage declares) come off the cores.
    assert 4 * decode.num_cpus + 2 * 0.8 <= 4
    written = placed(load(ray={"num_cpus": 4, "decode": {"num_cpus": 0.5}}))
    assert written.ray.decode.min_replicas == 1  # the user's pool, as written


def test_a_vlm_keeps_a_pool_of_its_own(tmp_path: Any) -> None:
    config = placed(load(stages={"vlm": {"model": str(tmp_path / "some-vlm")}}))
    assert "vlm" not in config.ray.fused
    assert {"ocr", "embed"} <= config.ray.fused
    decode = config.ray.decode
    assert decode.num_cpus is not None
    assert 4 * decode.num_cpus + 0.5 <= 4  # the VLM's declared half CPU stays free


@pytest.mark.parametrize(
    "sections",
    [
        {"ray": {"address": "ray://head:10001"}},
        {"ray": {"num_cpus": 4, "placement": "pools"}},
        {"runtime": {"executor": "local"}},
    ],
    ids=["cluster", "pools", "local-executor"],
)
def test_elsewhere_the_settings_stay_as_written(sections: dict[str, Any]) -> None:
    config = load(**sections)
    assert placed(config) == config
