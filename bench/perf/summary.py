"""The numbers of a benchmark run: per mode (throughput, latency, CPU, memory), then the bound,
efficiency and the ratios the acceptance criteria name."""

from __future__ import annotations

from typing import Any

from bench.perf.modes.common import ModeResult
from bench.perf.modes.common import cores as count_cores
from bench.perf.sampler import TreeSampler

MEMORY_MODE = "memory"
SINGLE_MODE = "sequential_single"  # one single-threaded process, the other cores idle
PER_CORE_MODE = "sequential_per_core"  # one single-threaded process per core, all at once
PER_CORE_WRITES_MODE = "sequential_per_core_writes"  # the same, each writing its results
RAY_ACTORS_MODE = "ray_actors_per_core"  # the same as plain Ray actors: Ray's own cost
LONG_SINGLE_MODE = "sequential_single_long"  # one single-threaded process, the 10 min video
LONG_PHASE = "long_alone"  # the 10 min video submitted alone to the service's defaults
DEFAULT_MODE = "streaming:st-default"


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(result: ModeResult, sampler: TreeSampler) -> dict[str, Any]:
    """The numbers of one mode: throughput, latency, CPU, memory."""
    if result.error:
        return {"error": result.error, "setting": result.setting}
    wall = max(1e-6, result.window_end - result.window_start)
    latencies = [result.done[v] - result.submitted[v] for v in result.done]
    cores = count_cores()
    tree_cpu, busy = sampler.cpu_between(result.window_start, result.window_end)
    videos = len(result.done)
    summary: dict[str, Any] = {
        "setting": result.setting,
        "videos": videos,
        "frames": result.frames,
        "wall_s": round(wall, 3),
        "videos_per_min": round(60 * videos / wall, 3),
        "frames_per_s": round(result.frames / wall, 3),
        "latency_p50_s": round(_percentile(latencies, 0.5), 3),
        "latency_p95_s": round(_percentile(latencies, 0.95), 3),
        "first_result_latency_s": round(
            min(result.done.values()) - min(result.submitted.values()), 3
        ),
        "cpu_busy_fraction": round(busy, 3),
        "tree_cpu_s": round(tree_cpu, 3),
        "tree_cpu_fraction": round(tree_cpu / (wall * cores), 3),
        # Machine busy beyond this mode's own processes: other work sharing the cores.
        "other_cpu_fraction": round(max(0.0, busy - tree_cpu / (wall * cores)), 3),
        "peak_rss_mb": round(sampler.peak_rss_mb(), 1),
        "window_peak_rss_mb": round(sampler.peak_rss_mb(result.window_start, result.window_end), 1),
        "setup_s": round(result.setup_s, 2),
        "cpu_s_by_process": sampler.cpu_by_name_between(result.window_start, result.window_end),
    }
    stage_cpu = result.stage_cpu_s or _stage_process_cpu(
        result.stage_processes, summary["cpu_s_by_process"]
    )
    if stage_cpu:
        summary["stage_cpu_s_per_video"] = _per_video(stage_cpu, videos)
    if result.extra.get("stage_work_cpu_s"):
        summary["stage_work_cpu_s_per_video"] = _per_video(result.extra["stage_work_cpu_s"], videos)
    extra = dict(result.extra)
    phases = extra.pop("phases", {})
    if phases:
        summary["phases"] = {name: _phase_summary(phase, sampler) for name, phase in phases.items()}
    for key in ("rebalances", "metrics", "job_wall_s", "speech_rows", "videos_written"):
        if key in extra:
            summary[key] = extra[key]
    return summary


def _per_video(by_stage: dict[str, float], videos: int) -> dict[str, float]:
    return {stage: round(seconds / max(1, videos), 3) for stage, seconds in by_stage.items()}


def _stage_process_cpu(markers: list[str], by_process: dict[str, float]) -> dict[str, float]:
    """CPU seconds per stage process kind (the part of each marker after its last colon)."""
    return {
        marker.rsplit(":", 1)[-1]: cpu
        for marker in markers
        if (cpu := sum(s for name, s in by_process.items() if marker in name))
    }


def _phase_summary(phase: dict[str, Any], sampler: TreeSampler) -> dict[str, Any]:
    start, end = phase["start"], phase["end"]
    latencies = [phase["done"][v] - phase["submitted"][v] for v in phase["done"]]
    return {
        "videos": len(phase["done"]),
        "frames": phase["frames"],
        "wall_s": round(end - start, 3),
        "latency_p50_s": round(_percentile(latencies, 0.5), 3),
        "latency_p95_s": round(_percentile(latencies, 0.95), 3),
        "peak_rss_mb": round(sampler.peak_rss_mb(start, end), 1),
        "rebalances": phase.get("rebalances"),
        "metrics": phase.get("metrics", {}),
    }


def compare(report: dict[str, Any], runs: dict[str, tuple[ModeResult, TreeSampler]]) -> None:
    """The bound, efficiency and the ratios the acceptance criteria name."""
    modes = report["modes"]
    _bounds_and_efficiency(report, modes)
    stream_name, stream = _best(modes, "streaming")
    rd_name, rd = _best(modes, "raydata")
    seq = modes.get("sequential", {})
    report["best_raydata"] = rd_name
    report["best_streaming"] = stream_name
    report["efficiency"] = stream.get("efficiency")
    report["efficiency_in_window"] = stream.get("cpu_breakdown", {}).get("efficiency_in_window")
    report["efficiency_vs_bound_alone"] = stream.get("efficiency_vs_bound_alone")
    if "cpu_breakdown" in stream:
        report["efficiency_breakdown"] = {
            "efficiency": stream["efficiency"],
            **stream["cpu_breakdown"],
            "cpu_busy_fraction": stream.get("cpu_busy_fraction"),
            "host_parallel_scaling": stream.get("host_parallel_scaling"),
        }
    report["speedup_vs_sequential"] = _ratio(stream, seq)
    report["speedup_vs_sequential_defaults"] = _ratio(stream, modes.get("sequential_defaults", {}))
    report["speedup_vs_raydata"] = _ratio(stream, rd)
    report["first_result_vs_raydata"] = _ratio(stream, rd, "first_result_latency_s")
    low = stream.get("phases", {}).get("low_load")
    if low and seq.get("videos"):
        isolated = seq["wall_s"] / seq["videos"]  # tuned single process, one video at a time
        report["low_load"] = {
            "latency_s": low["latency_p50_s"],
            "isolated_s": round(isolated, 3),
            "ratio": round(low["latency_p50_s"] / isolated, 3),
        }
    memory = modes.get(MEMORY_MODE, {})
    if memory and "error" not in memory:
        report["memory"] = _memory(memory)
    defaults_vs_processes(report, modes)
    report["acceptance"] = _acceptance(report)


def defaults_vs_processes(report: dict[str, Any], modes: dict[str, Any]) -> None:
    """The service's defaults against a process per core (the same videos, at once), and a
    10 min video alone against one process on it."""
    default, per_core = modes.get(DEFAULT_MODE, {}), modes.get(PER_CORE_MODE, {})
    report["default_vs_per_core"] = _ratio(default, per_core)
    report["first_result_default_vs_per_core"] = _ratio(default, per_core, "first_result_latency_s")
    writes = modes.get(PER_CORE_WRITES_MODE, {})
    if writes:  # a process pool that keeps its results, as the service does
        report["default_vs_per_core_writes"] = _ratio(default, writes)
        report["first_result_default_vs_per_core_writes"] = _ratio(
            default, writes, "first_result_latency_s"
        )
    actors = modes.get(RAY_ACTORS_MODE, {})
    if actors:  # the pool in Ray actors: how much of the gap Ray's runtime alone makes
        report["ray_actors_vs_per_core"] = _ratio(actors, per_core)
        report["first_result_ray_actors_vs_per_core"] = _ratio(
            actors, per_core, "first_result_latency_s"
        )
        report["default_vs_ray_actors"] = _ratio(default, actors)
        report["first_result_default_vs_ray_actors"] = _ratio(
            default, actors, "first_result_latency_s"
        )
    long_phase = default.get("phases", {}).get(LONG_PHASE)
    alone = modes.get(LONG_SINGLE_MODE, {})
    if long_phase and alone.get("wall_s"):
        report["long_video_alone"] = {
            "service_s": long_phase["latency_p50_s"],
            "single_process_s": alone["wall_s"],
        }
        report["long_video_alone_ratio"] = round(long_phase["latency_p50_s"] / alone["wall_s"], 3)


def _bounds_and_efficiency(report: dict[str, Any], modes: dict[str, Any]) -> None:
    """The bound (every core busy, else alone) and each mode's efficiency against it."""
    cores = count_cores()
    alone = _bound(modes.get(SINGLE_MODE, {}), cores, SINGLE_MODE)
    loaded = _bound(modes.get(PER_CORE_MODE, {}), cores, PER_CORE_MODE)
    report["bound"] = loaded if loaded["videos_per_min"] else alone
    report["bound_alone"] = alone
    bound, per_stage = report["bound"]["videos_per_min"], report["bound"]["cpu_s_per_video"]
    for name, summary in modes.items():
        # The memory runs process other videos (a 10 s clip, then the long one and the burst).
        if "videos_per_min" not in summary or not bound or name == MEMORY_MODE:
            continue
        summary["efficiency"] = round(summary["videos_per_min"] / bound, 3)
        if alone["videos_per_min"]:
            summary["efficiency_vs_bound_alone"] = round(
                summary["videos_per_min"] / alone["videos_per_min"], 3
            )
        if "stage_cpu_s_per_video" in summary:
            summary["cpu_breakdown"] = _breakdown(summary, per_stage, cores)


def _best(modes: dict[str, Any], prefix: str) -> tuple[str | None, dict[str, Any]]:
    """The fastest mode whose name starts with ``prefix`` and that ran without error."""
    found = [(name, s) for name, s in modes.items() if name.startswith(prefix) and "error" not in s]
    if not found:
        return None, {}
    return max(found, key=lambda item: item[1]["videos_per_min"])


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str = "videos_per_min") -> float | None:
    if key in a and b.get(key):
        return round(float(a[key]) / float(b[key]), 3)
    return None


def _memory(memory: dict[str, Any]) -> dict[str, Any]:
    phases = memory.get("phases", {})
    summary = {
        "short_peak_rss_mb": memory.get("window_peak_rss_mb"),
        "long_peak_rss_mb": phases.get("long", {}).get("peak_rss_mb"),
        "burst_peak_rss_mb": phases.get("burst", {}).get("peak_rss_mb"),
        "burst_videos": phases.get("burst", {}).get("videos"),
        "burst_rebalances": phases.get("burst", {}).get("rebalances"),
    }
    short, long_ = summary["short_peak_rss_mb"], summary["long_peak_rss_mb"]
    if short and long_:
        summary["long_vs_short"] = round(long_ / short, 3)
    return summary


def _bound(mode: dict[str, Any], cores: int, measured_in: str) -> dict[str, Any]:
    """The bottleneck bound from a single-threaded mode's stage CPU per video."""
    per_stage = mode.get("stage_cpu_s_per_video", {})
    total = sum(per_stage.values())
    return {
        "cpu_s_per_video": per_stage,
        "total_cpu_s_per_video": round(total, 3),
        "cores": cores,
        "videos_per_min": round(60 * cores / total, 3) if total else 0.0,
        "measured_in": measured_in,
        "formula": "cores * 60 / sum over stages of single-threaded CPU-s per video",
    }


def _breakdown(
    summary: dict[str, Any], bound_stages: dict[str, float], cores: int
) -> dict[str, Any]:
    """Where a mode's efficiency went. ``efficiency = efficiency_at_run_cost /
    stage_cost_vs_bound``: the first factor is the pipeline's (cores kept on stage work, as
    the stages cost in this run), the second how much more each video's stage work cost here
    than in the bound's measurement (the host's noise from one minute to the next, threads and
    periodic work of the mode's own processes). ``bound_stages``: the bound's CPU-s per video
    of each stage."""
    bound_cpu_s = sum(bound_stages.values())
    stage_s = sum(summary["stage_cpu_s_per_video"].values())
    tree_s = summary.get("tree_cpu_s") or 0.0
    stage_total = stage_s * summary["videos"]
    vpm = summary["videos_per_min"]
    breakdown = {
        "stage_cpu_s_per_video": round(stage_s, 3),
        "stage_cost_vs_bound": round(stage_s / bound_cpu_s, 3),
        "efficiency_at_run_cost": round(vpm * stage_s / (60 * cores), 3),
        "non_stage_cpu_fraction": round(max(0.0, 1 - stage_total / tree_s), 3) if tree_s else None,
    }
    work = summary.get("stage_work_cpu_s_per_video")
    if work:  # streaming: the stage threads' own CPU (the replicas' Ray machinery left out)
        breakdown.update(_in_window(vpm, work, bound_stages, cores))
    return breakdown


def _in_window(
    vpm: float, work: dict[str, float], bound_stages: dict[str, float], cores: int
) -> dict[str, Any]:
    """The efficiency against a bound from the stage threads' single-threaded CPU per video in
    the mode's own window: the share of the cores' time spent on stage work. The host's speed
    drifts by up to 15% from one minute to the next here (the same stage work, measured a
    minute apart); a bound measured in the same window moves with it.

    A stage of the bound the replicas do not time (speech: the ingest replica reads its windows
    in a thread of no stage activity, and CTranslate2 recognises in threads of its own) is
    counted at its bound cost times the drift of the timed stages (their cost here over their
    cost in the bound): an estimate, said so under ``untimed_stages_cpu_s_per_video``."""
    work_s = sum(work.values())
    timed_bound_s = sum(c for stage, c in bound_stages.items() if stage in work)
    drift = work_s / timed_bound_s if timed_bound_s else 1.0
    untimed = {
        stage: round(c * drift, 3)
        for stage, c in bound_stages.items()
        if stage not in work and c >= 0.001
    }
    window: dict[str, Any] = {"stage_work_cost_vs_bound": round(drift, 3)}
    if untimed:
        window["untimed_stages_cpu_s_per_video"] = untimed
    window["efficiency_in_window"] = round(vpm * (work_s + sum(untimed.values())) / (60 * cores), 3)
    return window


def _acceptance(report: dict[str, Any]) -> dict[str, Any]:
    def check(value: float | None, target: float, *, at_most: bool = False) -> dict[str, Any]:
        if value is None:
            return {"value": None, "target": target, "met": None}
        met = value <= target if at_most else value >= target
        return {"value": value, "target": target, "met": met}

    checks = {
        "efficiency": check(report.get("efficiency"), 0.85),
        "efficiency_in_window": check(report.get("efficiency_in_window"), 0.85),
        "speedup_vs_raydata": check(report.get("speedup_vs_raydata"), 1.1),
        "speedup_vs_sequential": check(report.get("speedup_vs_sequential"), 1.15),
        "first_result_vs_raydata": check(report.get("first_result_vs_raydata"), 0.5, at_most=True),
    }
    checks["default_vs_per_core"] = check(report.get("default_vs_per_core"), 1.0)
    checks["first_result_default_vs_per_core"] = check(
        report.get("first_result_default_vs_per_core"), 1.0, at_most=True
    )
    if "long_video_alone_ratio" in report:
        checks["long_video_alone_ratio"] = check(
            report["long_video_alone_ratio"], 0.6, at_most=True
        )
    if "low_load" in report:
        checks["low_load_ratio"] = check(report["low_load"]["ratio"], 1.3, at_most=True)
    memory = report.get("memory", {})
    if memory.get("long_vs_short") is not None:
        checks["memory_long_vs_short"] = check(memory["long_vs_short"], 1.15, at_most=True)
    if memory.get("burst_rebalances") is not None:
        checks["burst_rebalances"] = check(memory["burst_rebalances"], 0, at_most=True)
    return checks
