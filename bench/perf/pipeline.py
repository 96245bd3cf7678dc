"""The pipeline benchmark: sequential vs Ray Data vs reelsense streaming, on the same videos.

    python -m bench.perf.pipeline [--quick] [--memory] [--speech] [--sample-mode shots]
        [--skip-nonref] --json OUT

Writes OUT (JSON), OUT with .png (stage activity per replica over time, machine CPU below) and
OUT with .md (the tables). Every mode runs in a process of its own, sampled from here for
resident memory (summed over its process tree, Ray workers and the embedded broker included)
and CPU. With ``--speech`` the videos (and the warm-up) talk throughout, so every mode runs
speech recognition too (Ray Data in a branch of its own) and the bound counts it.

The bottleneck bound: every stage of every mode shares the same ``C`` cores, so a video costs
``sum over stages of c_s`` CPU-seconds wherever it runs, and no schedule can finish more than
``C / sum_s c_s`` videos per second. ``c_s`` is measured in this run, as process CPU time per
stage of the sequential runner with one thread everywhere, in ``C`` such processes at once
(``sequential_per_core``): the stage work costs what it costs when every core is busy, as it
is in any run that reaches the bound. The same cost with the other cores idle
(``sequential_single``) gives ``bound_alone``, reported beside it: on a host where a busy
neighbour core slows a core down, no schedule on every core reaches that one. (With a
dedicated core set per stage the bound would be ``min_s k_s / c_s`` instead; here nothing is
dedicated.) efficiency = achieved videos per minute / bound.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.perf import hostscale
from bench.perf.inputs import ROOT, add_input_arguments, bench_inputs
from bench.perf.mode_settings import (
    QUICK_RAYDATA,
    QUICK_STREAMING,
    RAYDATA_SETTINGS,
    STREAMING_SETTINGS,
)
from bench.perf.modes.common import (
    ModeResult,
    RunSpec,
    VideoSpec,
    bench_videos,
    cores,
    quiet_environment,
    repeated_video,
)
from bench.perf.report import write_markdown, write_timeline
from bench.perf.sampler import TreeSampler
from bench.perf.summary import (
    LONG_PHASE,
    LONG_SINGLE_MODE,
    MEMORY_MODE,
    PER_CORE_MODE,
    PER_CORE_WRITES_MODE,
    RAY_ACTORS_MODE,
    compare,
    summarize,
)

_BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
LONG_VIDEO_S = 600.0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quiet_environment()
    out = Path(args.json).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    count = args.videos or (2 if args.quick else 8)
    seconds = args.seconds or (6.0 if args.quick else 20.0)
    cache = Path(args.cache).resolve()
    base, warmup = bench_inputs(args, cache, count, seconds)
    work = Path(tempfile.mkdtemp(prefix="rs-bench-"))
    report: dict[str, Any] = {
        "machine": {"cores": cores(), "loadavg_at_start": os.getloadavg()},
        "inputs": {
            "videos": count,
            "seconds": seconds,
            "size": args.size,
            "grain": args.grain,
            "speech": args.speech,
            "sample_mode": base.sample_mode,
            "skip_nonref_frames": base.skip_nonref_frames,
            "sample_fps": base.sample_fps,
            "ocr_det_limit_side": base.ocr_det_limit_side,
            "chunk_frames": base.chunk_frames,
        },
        "modes": {},
    }
    runs: dict[str, tuple[ModeResult, TreeSampler]] = {}
    idle_deadline = time.monotonic() + args.idle_wait  # one budget for every wait of the run
    try:
        plan = _plan(args, base, warmup, cache)
        for name, module, planned in plan:
            spec = replace(planned, mode=name, workdir=str(work / name.replace(":", "-")))
            idle = wait_until_idle(args.idle_busy, max(0.0, idle_deadline - time.monotonic()))
            scaling = hostscale.measure()["scaling"]
            result, sampler = run_mode(module, spec, timeout_s=args.timeout)
            runs[name] = (result, sampler)
            report["modes"][name] = summarize(result, sampler)
            report["modes"][name]["machine_busy_before"] = idle
            report["modes"][name]["host_parallel_scaling"] = scaling
            print(f"{name}: {json.dumps(_headline(report['modes'][name]))}", flush=True)
        compare(report, runs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    write_timeline(out.with_suffix(".png"), runs, report)
    write_markdown(out.with_suffix(".md"), report)
    print(f"wrote {out}, {out.with_suffix('.png')}, {out.with_suffix('.md')}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, help="where to write the report")
    parser.add_argument(
        "--quick", action="store_true", help="2 videos of 6 s, one Ray Data setting"
    )
    parser.add_argument("--memory", action="store_true", help="add the memory runs")
    parser.add_argument(
        "--no-long",
        action="store_true",
        help="leave out the 10 min video alone (one process, then the service's defaults)",
    )
    add_input_arguments(parser)
    parser.add_argument(
        "--modes", default="sequential,raydata,streaming", help="also: backfill (on Ray Data)"
    )
    parser.add_argument("--raydata", help="Ray Data settings to try (names, comma separated)")
    parser.add_argument("--streaming", help="streaming settings to try (names, comma separated)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    return parser


def wait_until_idle(threshold: float, longest_s: float) -> float:
    """Wait (at most ``longest_s``) until the machine's CPU busy fraction over 3 s, with no
    mode running, is below ``threshold``; returns the last one measured."""
    import psutil

    deadline = time.monotonic() + longest_s
    while True:
        busy = float(psutil.cpu_percent(interval=3.0)) / 100
        if busy < threshold or time.monotonic() >= deadline:
            return round(busy, 3)
        print(f"machine {busy:.0%} busy with other work, waiting", flush=True)
        time.sleep(5)


def _process_pools(single: RunSpec, modes: set[str]) -> list[tuple[str, str, RunSpec]]:
    """One single-threaded process, one per core, and beside the service one per core that
    writes its results as the service does and the same pool run as Ray actors (Ray's own
    cost, the floor under the service)."""
    plan = [
        ("sequential_single", "sequential", single),
        (PER_CORE_MODE, "sequential", per_core_pool(single)),
    ]
    if "streaming" in modes:
        plan.append((PER_CORE_WRITES_MODE, "sequential", per_core_pool(single, write=True)))
        plan.append((RAY_ACTORS_MODE, "actors", per_core_pool(single)))
    return plan


def per_core_pool(single: RunSpec, *, write: bool = False) -> RunSpec:
    """``single`` run by one process per core; with ``write``, each writing its results as the
    service does."""
    setting: dict[str, Any] = {"processes": cores()}
    if write:
        setting["write"] = True
    return replace(single, setting=setting)


def _plan(
    args: argparse.Namespace, base: RunSpec, warmup: str, cache: Path
) -> list[tuple[str, str, RunSpec]]:
    """The modes to run, in order: (name, module, spec)."""
    modes = set(args.modes.split(","))
    raydata = (
        args.raydata.split(",")
        if args.raydata
        else list(QUICK_RAYDATA if args.quick else RAYDATA_SETTINGS)
    )
    streaming = (
        args.streaming.split(",")
        if args.streaming
        else list(QUICK_STREAMING if args.quick else STREAMING_SETTINGS)
    )
    videos = base.videos
    single = replace(base, threads="single", warmup=warmup)
    plan = _process_pools(single, modes)
    # The 10 min video alone: one process on it, then the service's defaults.
    wanted = "streaming" in modes and "st-default" in streaming and not args.quick
    long_video = _long_video(cache, videos[0]) if wanted and not args.no_long else None
    if long_video is not None:  # one process alone on it: what the service's split beats
        plan.append((LONG_SINGLE_MODE, "sequential", replace(single, videos=[long_video])))
    if "sequential" in modes:
        plan += [
            ("sequential", "sequential", replace(base, threads="tuned", warmup=warmup)),
            (
                "sequential_defaults",
                "sequential",
                replace(base, threads="defaults", warmup=warmup),
            ),
        ]
    if "raydata" in modes:
        plan += [
            (
                f"raydata:{name}",
                "raydata",
                replace(base, setting=RAYDATA_SETTINGS[name], warmup=warmup),
            )
            for name in raydata
        ]
    if "streaming" in modes:
        for name in streaming:
            setting = dict(STREAMING_SETTINGS.get(name, {}))
            if not args.quick:  # the same first video again, alone: latency at low load
                alone = asdict(replace(videos[0], video_id="alone-0"))
                setting["phases"] = [{"name": "low_load", "videos": [alone]}]
            if long_video is not None and name == "st-default":
                setting["phases"] = [
                    *setting.get("phases", []),
                    {"name": LONG_PHASE, "videos": [asdict(long_video)]},
                ]
            plan.append(
                (
                    f"streaming:{name}",
                    "streaming",
                    replace(base, setting=setting, warmup=warmup),
                )
            )
    if "backfill" in modes:  # ``reelsense backfill`` on Ray Data, one actor per core
        plan.append(("backfill:ray-data", "backfill", replace(base, warmup=warmup)))
    if args.memory:
        plan.append((MEMORY_MODE, "streaming", _memory_spec(base, cache, warmup, args.quick)))
    return plan


def _long_video(cache: Path, first: VideoSpec) -> VideoSpec:
    """The first bench video played until it lasts 10 minutes (remuxed, not re-encoded)."""
    repeats = max(1, round(LONG_VIDEO_S / first.seconds))
    path = repeated_video(
        Path(first.path), cache / f"long-{first.seconds:g}s-x{repeats}.mp4", repeats
    )
    return VideoSpec("long-alone", str(path), first.seconds * repeats)


def _memory_spec(base: RunSpec, cache: Path, warmup: str, quick: bool) -> RunSpec:
    """A 10 s video, then a 10 min one (the 10 s clip's content repeated, remuxed), then a
    burst of 200 events of small videos; peak memory is taken per phase."""
    short_s, repeats, burst = (10.0, 6, 20) if quick else (10.0, 60, 200)
    short = bench_videos(cache, 1, short_s, prefix="memory")[0]
    long_path = repeated_video(
        Path(short.path), cache / f"memory-{short_s:g}s-x{repeats}.mp4", repeats
    )
    smalls = bench_videos(cache, 10, 2.0, size=(640, 360), grain=2.0, prefix="burst")
    phases = [
        {
            "name": "long",
            "videos": [asdict(VideoSpec("long-0", str(long_path), short_s * repeats))],
        },
        {
            "name": "burst",
            "videos": [
                asdict(replace(smalls[i % len(smalls)], video_id=f"burst-{i}"))
                for i in range(burst)
            ],
        },
    ]
    return replace(
        base,
        videos=[replace(short, video_id="short-0")],
        setting={"phases": phases, "max_in_flight": 8},
        warmup=warmup,
    )


def run_mode(module: str, spec: RunSpec, *, timeout_s: float) -> tuple[ModeResult, TreeSampler]:
    work = Path(spec.workdir)
    work.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = work / "spec.json", work / "result.json", work / "mode.log"
    spec_path.write_text(spec.to_json())
    ray_tmp = Path(tempfile.mkdtemp(prefix="rsb-ray-"))  # short: Ray puts sockets there
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": str(ROOT)}
    if module in ("sequential", "actors") and spec.threads == "single":
        # Single-threaded includes the BLAS under the text embedder (numpy), as Ray sets it in
        # every replica: at a thread per core, two processes' BLAS threads spin against each
        # other.
        env.update(dict.fromkeys(_BLAS_THREADS, "1"))
    started = time.time()
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", f"bench.perf.modes.{module}", str(spec_path), str(out_path)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        with TreeSampler(process.pid) as sampler:
            try:
                code = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
    sampler.kill_leftovers()
    shutil.rmtree(ray_tmp, ignore_errors=True)
    if code != 0 or not out_path.exists():
        tail = log_path.read_text(errors="replace")[-3000:]
        result = ModeResult(
            mode=spec.mode,
            setting=spec.setting,
            window_start=started,
            window_end=time.time(),
            submitted={},
            done={},
            frames=0,
            error=f"exit {code}: {tail}",
        )
        print(f"{spec.mode} failed (exit {code}); log tail:\n{tail}", file=sys.stderr)
        return result, sampler
    return ModeResult.read(out_path), sampler


def _headline(summary: dict[str, Any]) -> dict[str, Any]:
    keys = ("videos_per_min", "frames_per_s", "first_result_latency_s", "peak_rss_mb", "error")
    return {k: summary[k] for k in keys if k in summary}


if __name__ == "__main__":
    sys.exit(main())
