"""``python -m bench.perf.pipeline --quick`` end to end on tiny inputs: every mode runs, the report
has its keys and sane values. No timing is asserted: the numbers belong in reports. Where
espeak-ng is installed the videos talk (``--speech``), so speech recognition runs in every mode
and is in the bound."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from bench.perf.modes.common import repeated_video
from bench.perf.pipeline import main as bench_main
from devkit.samples import write_long_video
from devkit.speech_videos import espeak_path

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
SPEECH = espeak_path() is not None  # the videos talk where espeak-ng can make them


@pytest.mark.timeout(1800)
def test_quick_bench_writes_json_png_and_markdown(tmp_path: Path) -> None:
    out = tmp_path / "out" / "bench.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.perf.pipeline",
            "--quick",
            "--videos",
            "2",
            "--seconds",
            "3",
            "--size",
            "640x360",
            "--chunk-frames",
            "2",
            "--cache",
            str(tmp_path / "videos"),
            "--json",
            str(out),
            *(["--speech"] if SPEECH else []),
        ],
        cwd=ROOT,
        check=True,
        timeout=1700,
    )
    report = json.loads(out.read_text())
    for key in (
        "efficiency",
        "speedup_vs_sequential",
        "speedup_vs_sequential_defaults",
        "speedup_vs_raydata",
        "bound",
        "acceptance",
    ):
        assert key in report, key
    modes = report["modes"]
    expected = {
        "sequential_single",
        "sequential_per_core",
        "sequential_per_core_writes",
        "ray_actors_per_core",
        "sequential",
        "sequential_defaults",
        "streaming:st-default",
    }
    assert expected <= set(modes)
    assert any(name.startswith("raydata:") for name in modes)
    for name, summary in modes.items():
        assert "error" not in summary, (name, summary.get("error"))
        assert summary["videos"] == 2, name
        assert summary["frames"] == 6, name  # 3 s at 1 frame/s, twice
        assert summary["videos_per_min"] > 0
        assert summary["first_result_latency_s"] > 0
        assert summary["latency_p95_s"] >= summary["latency_p50_s"] > 0
        assert summary["peak_rss_mb"] > 100  # models loaded: the tree was sampled
        assert 0 <= summary["cpu_busy_fraction"] <= 1
        assert summary["efficiency"] > 0
        assert summary["host_parallel_scaling"] > 0
    bound = report["bound"]
    assert bound["measured_in"] == "sequential_per_core"
    assert report["bound_alone"]["measured_in"] == "sequential_single"
    assert set(bound["cpu_s_per_video"]) >= {"decode", "ocr", "embed", "speech"}
    assert bound["total_cpu_s_per_video"] > 0
    assert bound["videos_per_min"] == pytest.approx(
        60 * bound["cores"] / bound["total_cpu_s_per_video"], rel=0.01
    )
    assert report["speedup_vs_raydata"] > 0
    assert report["efficiency"] == modes["streaming:st-default"]["efficiency"]
    stream = modes["streaming:st-default"]
    assert stream["rebalances"] == 0
    # Stage CPU from the replicas' processes: the service's defaults on a local Ray fuse OCR,
    # the labels and embeddings into the ingest replicas (runtime.placement), so there is one kind.
    assert set(stream["stage_cpu_s_per_video"]) == {"ingest"}
    # ... and the CPU of the threads doing each stage's work, from the service's metrics.
    work = stream["stage_work_cpu_s_per_video"]
    assert set(work) == {"fetch", "decode", "ocr", "labels", "qr", "fingerprint", "embed"}
    assert all(seconds > 0 for seconds in work.values())
    assert sum(work.values()) < stream["stage_cpu_s_per_video"]["ingest"] * 1.05
    # Every core had a process: the per-core run's processes each took a share of the videos.
    assert modes["sequential_per_core"]["setting"]["processes"] == bound["cores"]
    # The same pool writing its results: every video of the window written, none before.
    assert modes["sequential_per_core_writes"]["videos_written"] == 2
    assert modes["sequential_per_core"]["videos_written"] == 0
    assert report["default_vs_per_core_writes"] > 0
    # The same pool in plain Ray actors: each actor a runner, every video once.
    actors = modes["ray_actors_per_core"]
    assert actors["setting"]["processes"] == bound["cores"]
    assert actors["videos_written"] == 0
    assert report["ray_actors_vs_per_core"] > 0
    assert report["default_vs_ray_actors"] > 0
    split = report["efficiency_breakdown"]
    assert split["stage_cost_vs_bound"] > 0
    assert 0 < split["non_stage_cpu_fraction"] < 1
    assert stream["metrics"]['reelsense_stage_frames_total{stage="ocr"}'] >= 6
    if SPEECH:
        assert report["inputs"]["speech"] is True
        assert bound["cpu_s_per_video"]["speech"] > 0.05  # the model ran on every video
        rd = next(s for name, s in modes.items() if name.startswith("raydata:"))
        assert rd["speech_rows"] == 2
        # The replicas do not time speech: the in-window figure counts it at its bound cost.
        assert split["untimed_stages_cpu_s_per_video"]["speech"] > 0
    image = Image.open(out.with_suffix(".png"))
    assert image.width == 1600
    assert image.height > 200
    table = out.with_suffix(".md").read_text()
    assert "| sequential |" in table
    assert "videos/min" in table
    assert "| streaming:st-default |" in table.split("Where the efficiency went")[1]


def test_a_failing_mode_is_reported_not_fatal(tmp_path: Path) -> None:
    """A video the pipeline refuses makes the sequential run fail; the report says so."""
    cache = tmp_path / "videos"
    cache.mkdir()
    # Names the cache would use for the requested videos, filled with garbage.
    for seed in range(1):
        (cache / f"bench-1s-160x120-g0-{seed}.mp4").write_bytes(b"not a video")
    (cache / "warmup-2s-640x360-g0-0.mp4").write_bytes(b"not a video either")
    out = tmp_path / "bench.json"
    code = bench_main(
        [
            "--videos", "1", "--seconds", "1", "--size", "160x120", "--grain", "0",
            "--modes", "sequential", "--cache", str(cache), "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    assert "error" in report["modes"]["sequential_single"]
    # Its processes fail while loading (the warmup video): none waits for the others forever.
    assert "sequential processes failed" in report["modes"]["sequential_per_core"]["error"]
    assert report["efficiency"] is None
    assert report["acceptance"]["efficiency"]["met"] is None
    assert out.with_suffix(".md").read_text().count("failed") >= 1


def test_repeated_video_plays_the_source_several_times(tmp_path: Path) -> None:
    import av

    source = write_long_video(tmp_path / "src.mp4", 2.0, size=(160, 96), grain=0.0, fps=10)
    target = repeated_video(source.path, tmp_path / "long.mp4", 3)
    with av.open(str(target)) as container:
        stream = container.streams.video[0]
        times = [float(f.time) for f in container.decode(stream) if f.time is not None]
    assert len(times) == 60
    assert times == sorted(times)
    assert times[-1] == pytest.approx(5.9, abs=0.05)
