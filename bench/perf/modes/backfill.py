"""``reelsense backfill`` on Ray Data over the run's videos: what a batch job over a catalogue
gets from the same stages, checkpoints and sinks as the service.

    python -m bench.perf.modes.backfill SPEC OUT

Starts redis-server and a local Ray, processes the warm-up video (so that the stage models
are on this machine's disk cache, as the service's warm-up does), then runs the backfill on
the videos. With ``"done_without_speech"`` in the setting the videos are first processed with
speech recognition off, unmeasured, and the measured run adds it (``bench.perf.backfill``'s "add a
stage"). The window runs from the first video an actor took to the last one it finished:
actor start-up and model loading, which every run of a batch job pays, are left out, as the
Ray Data baseline leaves them out (``bench.perf.modes.raydata``); ``job_wall_s`` has them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance

from backfill.runner import run_backfill
from backfill.sources import BackfillItem
from bench.perf.modes.common import ModeResult, RunSpec, cores, local_config, mode_main, now
from consumers.events import VideoUploaded
from core.config import ServiceConfig
from devkit.services import redis_server


def _items(videos: list[tuple[str, str]]) -> list[BackfillItem]:
    return [
        BackfillItem(VideoUploaded(video_id=vid, uri=Path(path).as_uri()), where=vid)
        for vid, path in videos
    ]


def run(spec: RunSpec) -> ModeResult:
    workdir = Path(spec.workdir)
    setting = spec.setting
    workers = int(setting.get("workers", cores()))
    local = local_config(spec)
    with redis_server(workdir / "redis").start() as redis:
        config = ServiceConfig.load(
            limits=local.limits.model_dump(exclude_unset=True),
            stages=local.stages.model_dump(exclude_unset=True),
            redis={"url": f"redis://127.0.0.1:{redis.port}/0"},
            storage={
                "lance_uri": str(workdir / "lance"),
                "object_store_uri": str(workdir / "objects"),
            },
            asr={"enabled": spec.speech, "cpu_threads": 1},
            ray={"num_cpus": cores()},
            runtime={"workdir": str(workdir / "work"), "executor": "local"},
            backfill={"workers": workers, "worker_cpus": float(setting.get("worker_cpus", 0.9))},
        )
        started = now()
        if spec.warmup:
            run_backfill(_items([("warmup", spec.warmup)]), config, progress=False)
        warm = now()
        taken: list[float] = []
        done: dict[str, float] = {}

        def took(row: dict[str, Any]) -> None:
            if row["outcome"] != "done":
                raise RuntimeError(f"{row['video_id']}: {row['outcome']}: {row['reason']}")
            taken.append(float(row["started"]))
            done[str(row["video_id"])] = float(row["ended"])

        videos = [(v.video_id, v.path) for v in spec.videos]
        if setting.get("done_without_speech"):  # finished once already, before speech was on
            asr = config.asr.model_copy(update={"enabled": False})
            before = config.model_copy(update={"asr": asr})
            run_backfill(_items(videos), before, progress=False)
        summary = run_backfill(_items(videos), config, progress=False, on_row=took)
        ended = now()
    frames = lance.dataset(str(workdir / "lance" / "frames.lance")).count_rows(
        filter="video_id != 'warmup'"
    )
    window_start = min(taken)  # a batch job has every video at hand from its start
    return ModeResult(
        mode=spec.mode,
        setting=dict(setting),
        window_start=window_start,
        window_end=max(done.values()),
        submitted=dict.fromkeys(done, window_start),
        done=done,
        frames=frames,
        setup_s=window_start - started,
        stage_processes=["MapWorker"],
        extra={
            "job_wall_s": round(ended - warm, 3),
            "workers": summary.workers,
            "frames_decoded": summary.frames_decoded,
        },
    )


if __name__ == "__main__":
    mode_main(run)
