"""The batch parts of ``bench.perf.backfill``: ``reelsense backfill`` on Ray Data against the
streaming service, and a stage added to finished videos against a full recompute.

(a) ``throughput``: ``bench.perf.pipeline`` on the same videos with the service's defaults
    (``streaming:st-default``) and the Ray Data backfill (``backfill:ray-data``), each one's
    efficiency against the same bound (``sequential_per_core``'s stage costs).
(c) ``added_stage``: talking videos finished with speech recognition off; then speech turned
    on and the same videos backfilled (only the speech stage runs), against the same videos
    backfilled from nothing with speech on. Both measured warm (the window from the first
    video an actor took to the last it finished), CPU summed over the whole process tree.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.perf import pipeline
from bench.perf.modes.common import RunSpec, bench_videos


def throughput(videos: int, seconds: float, cache: Path) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="rs-backfill-a-")) / "pipeline.json"
    argv = ["--json", str(out), "--modes", "backfill,streaming", "--streaming", "st-default"]
    argv += ["--no-long", "--videos", str(videos), "--seconds", str(seconds)]
    pipeline.main([*argv, "--cache", str(cache)])
    report = json.loads(out.read_text())
    modes = report["modes"]
    batch, stream = modes["backfill:ray-data"], modes["streaming:st-default"]
    return {
        "videos": videos,
        "seconds": seconds,
        "bound_videos_per_min": report["bound"]["videos_per_min"],
        "raydata_backfill_videos_per_min": batch.get("videos_per_min"),
        "streaming_videos_per_min": stream.get("videos_per_min"),
        "raydata_backfill_efficiency": batch.get("efficiency"),
        "streaming_efficiency": stream.get("efficiency"),
        "backfill_vs_streaming": _ratio(batch.get("videos_per_min"), stream.get("videos_per_min")),
        "report": str(out),
    }


def added_stage(videos: int, seconds: float, cache: Path) -> dict[str, Any]:
    talking = bench_videos(cache, videos, seconds, speech=True)
    warmup = bench_videos(cache, 1, 2.0, size=(640, 360), grain=0.0, prefix="warmup", speech=True)
    work = Path(tempfile.mkdtemp(prefix="rs-backfill-c-"))
    base = RunSpec(mode="", workdir="", videos=talking, speech=True, warmup=warmup[0].path)
    runs = {}
    for name, setting in (("added", {"done_without_speech": True}), ("full", {})):
        spec = replace(base, mode=f"backfill:{name}", workdir=str(work / name), setting=setting)
        result, sampler = pipeline.run_mode("backfill", spec, timeout_s=7200)
        if result.error:
            raise RuntimeError(f"{name}: {result.error}")
        cpu_s, busy = sampler.cpu_between(result.window_start, result.window_end)
        runs[name] = {
            "wall_s": round(result.window_end - result.window_start, 2),
            "cpu_s": round(cpu_s, 1),
            "machine_busy": round(busy, 3),
            "frames_decoded": result.extra["frames_decoded"],
            "job_wall_s": result.extra["job_wall_s"],
        }
        print(f"{name}: {runs[name]}", flush=True)
    added, full = runs["added"], runs["full"]
    return {
        "videos": videos,
        "seconds": seconds,
        "added": added,
        "full_recompute": full,
        "added_stage_frames_decoded": added["frames_decoded"],
        "added_stage_cost_ratio": _ratio(added["cpu_s"], full["cpu_s"]),
        "added_stage_time_ratio": _ratio(added["wall_s"], full["wall_s"]),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None
