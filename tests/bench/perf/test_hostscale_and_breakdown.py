"""The host-scaling probe and the efficiency breakdown of the benchmark report."""

from __future__ import annotations

import pytest

from bench.perf import hostscale
from bench.perf.summary import _stage_process_cpu, compare


def test_host_scaling_runs_the_kernel_alone_and_on_every_core() -> None:
    found = hostscale.measure(rounds=5, cores=2)
    assert found["cores"] == 2
    assert len(found["together_cpu_s"]) == 2  # one CPU time per process
    assert found["alone_cpu_s"] > 0
    assert all(t > 0 for t in found["together_cpu_s"])
    mean = sum(found["together_cpu_s"]) / 2
    assert found["scaling"] == pytest.approx(found["alone_cpu_s"] / mean, abs=0.01)


def test_stage_cpu_is_summed_per_process_kind() -> None:
    by_process = {
        "ray::ServeReplica:reelsense-pools:ingest": 27.0,
        "ray::ServeReplica:reelsense-pools:ocr": 23.5,
        "ray::ServeReplica:reelsense-pools:sink-writer": 0.6,
        "ray::ServeController": 0.5,
    }
    markers = [f"ServeReplica:reelsense-pools:{p}" for p in ("ingest", "ocr", "vlm")]
    # Two OCR replicas share a title: the sampler has already added them up.
    assert _stage_process_cpu(markers, by_process) == {"ingest": 27.0, "ocr": 23.5}


def test_efficiency_splits_into_the_pipelines_share_and_the_stage_cost_inflation() -> None:
    report = {
        "modes": {
            "sequential_single": {
                "videos": 8,
                "videos_per_min": 9.0,
                "stage_cpu_s_per_video": {"decode": 3.0, "ocr": 2.7},
                "tree_cpu_s": 46.0,
            },
            "sequential_per_core": {
                "videos": 8,
                "videos_per_min": 19.0,
                "stage_cpu_s_per_video": {"decode": 3.2, "ocr": 2.8},
                "tree_cpu_s": 48.5,
            },
            "streaming:x": {
                "videos": 8,
                "videos_per_min": 15.0,
                "stage_cpu_s_per_video": {"ingest": 3.6, "ocr": 3.0},
                "stage_work_cpu_s_per_video": {"fetch": 0.1, "decode": 3.1, "ocr": 2.8},
                "tree_cpu_s": 57.0,
                "cpu_busy_fraction": 0.97,
                "host_parallel_scaling": 0.9,
            },
            "raydata:y": {"videos": 8, "videos_per_min": 11.0},
            "memory": {"videos": 1, "videos_per_min": 16.0, "stage_cpu_s_per_video": {"x": 3.0}},
        }
    }
    compare(report, {})
    # The bound: stage costs with every core busy (one single-threaded process per core).
    assert report["bound"]["measured_in"] == "sequential_per_core"
    assert report["bound_alone"]["measured_in"] == "sequential_single"
    cores = report["bound"]["cores"]
    bound = 60 * cores / 6.0
    assert report["bound"]["videos_per_min"] == pytest.approx(bound, abs=0.001)
    assert report["bound_alone"]["videos_per_min"] == pytest.approx(60 * cores / 5.7, abs=0.001)
    stream = report["modes"]["streaming:x"]
    assert stream["efficiency"] == pytest.approx(15.0 / bound, abs=0.001)
    assert stream["efficiency_vs_bound_alone"] == pytest.approx(
        15.0 * 5.7 / (60 * cores), abs=0.001
    )
    assert report["efficiency_vs_bound_alone"] == stream["efficiency_vs_bound_alone"]
    split = stream["cpu_breakdown"]
    assert split["stage_cpu_s_per_video"] == pytest.approx(6.6)
    assert split["stage_cost_vs_bound"] == pytest.approx(1.1)
    assert split["stage_work_cost_vs_bound"] == pytest.approx(1.0)  # the replicas' own work
    assert split["efficiency_at_run_cost"] == pytest.approx(15.0 * 6.6 / (60 * cores), abs=0.001)
    assert split["non_stage_cpu_fraction"] == pytest.approx(1 - 6.6 * 8 / 57.0, abs=0.001)
    # The bound taken from the stage threads' CPU in the mode's own window: 6.0 CPU-s/video.
    assert split["efficiency_in_window"] == pytest.approx(15.0 * 6.0 / (60 * cores), abs=0.001)
    assert report["efficiency_in_window"] == split["efficiency_in_window"]
    assert report["acceptance"]["efficiency_in_window"]["target"] == 0.85
    assert stream["efficiency"] == pytest.approx(
        split["efficiency_at_run_cost"] / split["stage_cost_vs_bound"], abs=0.002
    )
    assert report["modes"]["sequential_per_core"]["cpu_breakdown"]["stage_cost_vs_bound"] == 1.0
    assert report["modes"]["sequential_single"]["cpu_breakdown"]["stage_cost_vs_bound"] == 0.95
    assert "stage_work_cost_vs_bound" not in report["modes"]["sequential_single"]["cpu_breakdown"]
    assert "efficiency_in_window" not in report["modes"]["sequential_single"]["cpu_breakdown"]
    assert "cpu_breakdown" not in report["modes"]["raydata:y"]  # its stage CPU is not known
    assert "efficiency" not in report["modes"]["memory"]  # other videos: the bound is not theirs
    assert report["efficiency_breakdown"]["host_parallel_scaling"] == 0.9
    assert report["efficiency_breakdown"]["efficiency"] == stream["efficiency"]


def test_without_the_per_core_run_the_bound_is_the_single_process_one() -> None:
    single = {"videos": 2, "videos_per_min": 9.0, "stage_cpu_s_per_video": {"decode": 6.0}}
    report = {"modes": {"sequential_single": single}}
    compare(report, {})
    assert report["bound"]["measured_in"] == "sequential_single"
    assert report["bound"] == report["bound_alone"]
    assert single["efficiency"] == single["efficiency_vs_bound_alone"]
