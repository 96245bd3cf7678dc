"""The RayService path: the three Serve applications a KubeRay config imports, run for real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ray import serve

from checkpoint.base import VideoState
from core.api_settings import InsecureConfig
from devkit.run_config import dump_config
from devkit.service_run import ServiceRun
from devkit.workload import write_videos
from runtime.serve_apps import consumers_app, pools_app

pytestmark = pytest.mark.slow


async def test_consumer_replicas_process_uploads_with_the_pools_app(
    tmp_path: Path, service_run: ServiceRun, serve_apps: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = service_run
    config_path = str(dump_config(run.config, tmp_path / "service.yaml"))
    # Without its webhook secret (it travels in the environment) the consumers refuse to start.
    with pytest.raises(InsecureConfig, match=r"notify\.webhook_secrets is empty"):
        consumers_app({"config": config_path})
    monkeypatch.setenv("REELSENSE_NOTIFY_WEBHOOK_SECRETS", json.dumps([run.secret]))
    serve.run(pools_app({"config": config_path}), name="reelsense-pools", route_prefix=None)
    consumers = serve.run(
        consumers_app({"config": config_path, "replicas": "1", "num_cpus": "0.05"}),
        name="reelsense-consumers",
        route_prefix=None,
    )
    try:
        info = await consumers.remote()
        assert info["pipeline_version"].startswith("v")
        videos = write_videos(run.videos_dir, 2)
        await run.upload(videos)
        statuses = await run.wait_final(sorted(videos), timeout_s=300)
        assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
    finally:
        serve.delete("reelsense-consumers")
