"""Stages from another package (``tests/plugins``: a frames stage ``colour``, a video stage
``colour_runs``), installed beside the service and named in its configuration, with no project
file edited: under the Ray Data backfill and under the service on Ray; in the result, search,
the dashboard's stage list and ``reelsense status``; the video stage added to 20 finished
videos decodes no frame."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from checkpoint.base import VideoState
from core.config import ServiceConfig
from devkit.run_config import dump_config, with_sections
from devkit.service_run import ServiceRun
from devkit.workload import write_videos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "tests" / "plugins"
BOTH = {"colour": {}, "colour_runs": {}}


def installed_env() -> dict[str, str]:
    """The environment of a process that has the plug-in package installed."""
    paths = [str(PLUGINS), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def backfill(config: ServiceConfig, root: Path, name: str, videos: dict[str, Path]) -> Any:
    """``reelsense backfill`` of ``videos`` with ``config``: its JSON report."""
    settings = with_sections(
        config,
        runtime={"executor": "local"},
        ray={"num_cpus": 2},
        backfill={"worker_cpus": 1.0},
    )
    path = dump_config(settings, root / f"{name}.yaml")
    manifest = root / f"{name}.jsonl"
    lines = [json.dumps({"id": vid, "uri": p.as_uri()}) for vid, p in videos.items()]
    manifest.write_text("\n".join(lines) + "\n")
    argv = [sys.executable, "-m", "cli.main", "backfill", "--manifest", str(manifest)]
    argv += ["--config", str(path), "--json", "--workers", "2"]
    env = {**installed_env(), "RAY_TMPDIR": ""}
    done = subprocess.run(  # noqa: PLW1510 - its exit code is asserted with its output
        argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=600
    )
    output = "\n" + done.stdout
    start = output.rfind("\n{\n")
    assert start >= 0, (output + done.stderr)[-4000:]
    assert done.returncode == 0, output[-4000:]
    return json.loads(output[start + 1 :])


async def test_plug_in_stages_under_the_backfill_and_the_service(service_run: ServiceRun) -> None:
    run = service_run
    run.process_env.update({"PYTHONPATH": installed_env()["PYTHONPATH"]})
    config = run.configure(stages={"plugins": BOTH}, asr={"enabled": False})
    colour_only = with_sections(config, stages={"plugins": {"colour": {}}})
    videos = write_videos(run.videos_dir, 21)  # 2 s each: a white scene, then a blue one
    fresh = "vid-20"
    finished = {vid: path for vid, path in videos.items() if vid != fresh}

    # 20 videos done with the frames stage alone, on Ray Data.
    first = backfill(colour_only, run.root, "colour", finished)
    assert (first["done"], first["failures"]) == (20, [])
    assert first["frames_decoded"] > 0
    # The video stage added to them: it runs on their stored results, nothing is decoded.
    added = backfill(config, run.root, "runs", finished)
    assert (added["done"], added["already_done"], added["failures"]) == (20, 0, [])
    assert added["frames_decoded"] == 0

    # The service on Ray with both stages: a new video through every stage.
    service = run.start_process()
    await run.upload({fresh: videos[fresh]})
    statuses = await run.wait_final([fresh], timeout_s=300)
    assert statuses[fresh].status is VideoState.DONE, service.log_tail()
    assert statuses[fresh].stages["colour"].done == statuses[fresh].chunks_total
    assert statuses[fresh].stages["colour_runs"].done == 1

    await service.wait_healthy()
    api = f"http://127.0.0.1:{service.api_port}"
    async with httpx.AsyncClient(base_url=api, timeout=60) as client:
        stages = (await client.get("/v1/stages")).json()["stages"]
        # The service's stages, then the package's, each after what it reads.
        assert stages[-6:] == [
            "colour",
            "shot_labels",
            "chapters",
            "review",
            "duplicates",
            "colour_runs",
        ]
        versions = {}
        for video_id in ("vid-00", "vid-13", fresh):
            answer = await client.get(f"/v1/videos/{video_id}/result", params={"frames": True})
            assert answer.status_code == 200, answer.text
            result = answer.json()
            versions[video_id] = result["stage_versions"]
            colours = [frame["extras"]["colour"] for frame in result["frames"]]
            assert (colours[0], colours[-1]) == ("white", "blue"), colours
            runs = result["outputs"]["colour_runs"]
            assert [s["text"] for s in runs["segments"]] == ["white screen", "blue screen"]
            assert all(s["kind"] == "colour_run" and s["searchable"] for s in runs["segments"])
        # The backfilled and the service's results are of the same pipeline version.
        assert versions["vid-00"] == versions[fresh]

        found = await client.get(
            "/v1/search", params={"q": "blue", "kind": "colour_run", "k": 30, "method": "text"}
        )
        assert found.status_code == 200, found.text
        hits = found.json()["hits"]
        assert {hit["video_id"] for hit in hits} == set(videos)
        assert all(hit["kinds"] == ["colour_run"] and hit["start_s"] == 1.0 for hit in hits)

    shown = await cli("status", fresh, "--api", api)
    assert "colour" in shown
    assert "colour_runs" in shown
    printed = await cli("result", fresh, "--frames", "--api", api)
    assert "blue screen" in printed  # the video stage's segments
    assert "colour: blue" in printed  # the frames stage's finding per sample


async def cli(*args: str) -> str:
    """What ``reelsense ARGS`` prints, with the plug-in package installed; asserted to exit 0."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**installed_env(), "COLUMNS": "200"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
