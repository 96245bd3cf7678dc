"""The idle-tax benchmark: the service with its defaults, one warm-up video, then what each of
its processes takes with nothing in flight."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_idle_tax_is_reported_per_process(tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    subprocess.run(
        [sys.executable, "-m", "bench.perf.idle", "--seconds", "8", "--json", str(out)],
        check=True,
        timeout=600,
    )
    report = json.loads(out.read_text())
    assert report["seconds"] >= 8.0
    by_process = report["cores_by_process"]
    # Every part of the service is there: the stage replicas, the writer, Ray's own processes.
    for part in (
        "ray::ServeReplica:reelsense-pools:ingest",
        "ray::ServeReplica:reelsense-pools:sink-writer",
        "ray::ServeController",
        "raylet",
        "gcs_server",
    ):
        assert by_process[part] > 0, part
    # Idle means idle: well under a core in all, and the parts add up to the whole (the
    # sampler's own CPU taken out of both; each part is rounded to 0.01 CPU-s and those under
    # 0.005 CPU-s are left out, under 0.01 of a core in all over 8 s).
    assert 0 < report["cores_of_tree"] < 1.0
    assert 0 <= report["sampler_cores"] < 0.1
    assert abs(sum(by_process.values()) - report["cores_of_tree"]) < 0.02
