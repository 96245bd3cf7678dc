"""bench.perf.rounds: the ratios are taken within each round and their medians reported."""

from __future__ import annotations

from typing import Any

import pytest

from bench.perf.modes.common import RunSpec
from bench.perf.rounds import _plan, rounds_report
from bench.perf.summary import DEFAULT_MODE, PER_CORE_MODE, PER_CORE_WRITES_MODE


def _round(per_core: float, writes: float, default: float | None) -> dict[str, dict[str, Any]]:
    service: dict[str, Any] = (
        {"videos_per_min": default, "first_result_latency_s": 60 / default}
        if default is not None
        else {"error": "exit 1: broker down"}
    )
    return {
        PER_CORE_MODE: {"videos_per_min": per_core, "first_result_latency_s": 60 / per_core},
        PER_CORE_WRITES_MODE: {"videos_per_min": writes, "first_result_latency_s": 60 / writes},
        DEFAULT_MODE: service,
    }


def test_each_ratio_is_taken_within_its_round_and_the_median_over_rounds() -> None:
    # A host that slows down between rounds: every mode of round 2 is slower.
    report = rounds_report([_round(30.0, 27.0, 27.0), _round(20.0, 20.0, 16.0)])

    assert [r["ratios"]["default_vs_per_core"] for r in report["rounds"]] == [0.9, 0.8]
    assert report["median"]["default_vs_per_core"] == 0.85
    assert report["median"]["default_vs_per_core_writes"] == 0.9  # 1.0 and 0.8
    # First results: 2.222 s against 2 s, then 3.75 s against 3 s.
    firsts = [r["ratios"]["first_result_default_vs_per_core"] for r in report["rounds"]]
    assert firsts == [1.111, 1.25]
    assert report["median"]["first_result_default_vs_per_core"] == pytest.approx(1.18, abs=1e-3)
    # Across rounds the pooled figure would mix the host's two speeds: 43/50 = 0.86.
    assert report["rounds"][1]["modes"][DEFAULT_MODE] == {
        "videos_per_min": 16.0,
        "first_result_latency_s": 3.75,
    }


def test_a_round_whose_service_run_failed_is_left_out_of_the_medians() -> None:
    report = rounds_report([_round(30.0, 27.0, 24.0), _round(30.0, 27.0, None)])

    assert report["rounds"][1]["ratios"]["default_vs_per_core"] is None
    assert report["rounds"][1]["modes"][DEFAULT_MODE] == {"error": "exit 1: broker down"}
    assert report["median"]["default_vs_per_core"] == 0.8


def test_a_round_runs_the_pool_the_writing_pool_and_the_service_defaults() -> None:
    base = RunSpec(mode="", workdir="", videos=[], warmup="/videos/warmup.mp4")

    plan = _plan(base)

    assert [(name, module) for name, module, _ in plan] == [
        (PER_CORE_MODE, "sequential"),
        (PER_CORE_WRITES_MODE, "sequential"),
        (DEFAULT_MODE, "streaming"),
    ]
    assert all(spec.threads == "single" and spec.warmup == base.warmup for _, _, spec in plan)
    assert plan[1][2].setting["write"] is True
    assert plan[2][2].setting == {}
