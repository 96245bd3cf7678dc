"""The RayService path: the three Serve applications a KubeRay config imports, run for real."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray import serve

from checkpoint.base import VideoState
from checkpoint.redis_store import RedisCheckpointStore
from devkit.services import free_port
from runtime.serve_apps import consumers_app, pools_app
from tests.e2e.support import (
    dump_config,
    publish,
    service_config,
    upload_record,
    wait_final,
    webhook_secret,
    write_videos,
)

pytestmark = pytest.mark.slow


async def test_consumer_replicas_process_uploads_with_the_pools_app(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, serve_apps: None, unique: str
) -> None:
    config = service_config(
        tmp_path,
        bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        unique=unique,
        api_port=free_port(),
        hook_url="http://127.0.0.1:9/unused",
        secret=webhook_secret(),
    )
    config_path = str(dump_config(config, tmp_path / "service.yaml"))
    serve.run(pools_app({"config": config_path}), name="reelsense-pools", route_prefix=None)
    consumers = serve.run(
        consumers_app({"config": config_path, "replicas": "1", "num_cpus": "0.05"}),
        name="reelsense-consumers",
        route_prefix=None,
    )
    store = RedisCheckpointStore(config.redis)
    try:
        info = await consumers.remote()
        assert info["pipeline_version"].startswith("v")
        videos = write_videos(tmp_path / "videos", 2)
        await publish(
            kafka_bootstrap, config.kafka.topic, [upload_record(v, p) for v, p in videos.items()]
        )
        statuses = await wait_final(store, sorted(videos), timeout_s=300)
        assert all(s.status is VideoState.DONE for s in statuses.values()), statuses
    finally:
        serve.delete("reelsense-consumers")
        await store.close()
