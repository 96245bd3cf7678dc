"""The progress API as a Ray Serve ingress deployment, built inside its replica."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve import Application

from api.app import api_deployment, create_app
from api.dead_letters import DeadLetterSource
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ServiceConfig
from core.records import SearchHit
from storage.uri import object_store_from_uri

API_APP = "reelsense-api"


class TextSearch:
    """Query text -> embedding (the same model as the embed stage) -> nearest frames."""

    def __init__(self, config: ServiceConfig) -> None:
        self._config = config
        # The model loads in the background from the start, so the first query does not wait
        # for it (loading takes seconds) unless it comes very early.
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="search-load")
        self._ready = self._loader.submit(self._build)

    async def __call__(self, query: str, k: int, tenant: str | None) -> list[SearchHit]:
        embedder, index = await self._load()
        vector = (await asyncio.to_thread(embedder.embed, [query]))[0]
        hits: list[SearchHit] = await asyncio.to_thread(
            index.search, vector.tolist(), k=k, tenant=tenant
        )
        return hits

    async def _load(self) -> tuple[Any, Any]:
        return await asyncio.wrap_future(self._ready)

    def _build(self) -> tuple[Any, Any]:
        from models.embedding import TextEmbedder
        from sinks.vectors import LanceVectorIndex

        stages = self._config.stages
        embedder = TextEmbedder(stages.embed_model, threads=stages.embed_threads)
        embedder.load()
        return embedder, LanceVectorIndex.from_settings(self._config.storage)


def build_api(config_json: str) -> FastAPI:
    """Runs in the API replica: the store's connections are made there, never pickled."""
    config = ServiceConfig.model_validate_json(config_json)
    store = RedisCheckpointStore(config.redis)
    dead_letters = DeadLetterSource.from_config(config)
    return create_app(
        store,
        search=TextSearch(config),
        tokens=config.api.bearer_tokens(),
        dead_letters=dead_letters.newest,
        replay=dead_letters.replay,
        results=object_store_from_uri(config.storage.object_store_uri, config.storage),
        on_close=[dead_letters.close],
        heartbeat_s=config.api.heartbeat_s,
        health_timeout_s=config.api.health_timeout_s,
        max_page=config.api.max_page,
        max_streams=config.api.max_streams,
        max_streams_per_tenant=config.api.max_streams_per_tenant,
        replays_per_minute=config.api.replays_per_minute,
        owns_store=True,
    )


def api_application(config: ServiceConfig) -> Application:
    """The API as a Serve application (its HTTP address is Serve's proxy's)."""
    builder = functools.partial(build_api, config.to_replica_json())
    deployment = api_deployment(
        builder, num_replicas=config.api.replicas, num_cpus=config.api.replica_cpus
    )
    return deployment.bind()


def deploy_api(config: ServiceConfig) -> None:
    """Run the API on Serve's HTTP proxy at ``config.api.host:port`` (route prefix ``/``)."""
    serve.run(
        api_application(config),
        name=API_APP,
        route_prefix="/",
        logging_config={"log_level": "WARNING"},
    )
