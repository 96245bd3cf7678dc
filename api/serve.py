"""The progress API as a Ray Serve ingress deployment, built inside its replica."""

from __future__ import annotations

import functools

from fastapi import FastAPI
from ray import serve
from ray.serve import Application

from api.app import api_deployment, create_app
from api.dead_letters import DeadLetterSource
from api.search import SegmentSearch
from checkpoint.redis_store import RedisCheckpointStore
from consumers.publishing import publish_deletion
from core.config import ServiceConfig
from core.search import SEARCHED_KINDS
from stages.pipeline import Pipeline
from storage.uri import object_store_from_uri

API_APP = "reelsense-api"


def build_api(config_json: str) -> FastAPI:
    """Runs in the API replica: the store's connections are made there, never pickled."""
    config = ServiceConfig.model_validate_json(config_json)
    store = RedisCheckpointStore(config.redis)
    dead_letters = DeadLetterSource.from_config(config)
    pipeline = Pipeline.from_config(config)
    return create_app(
        store,
        search=SegmentSearch.from_config(config),
        tokens=config.api.bearer_tokens(),
        dead_letters=dead_letters.newest,
        replay=dead_letters.replay,
        results=object_store_from_uri(config.storage.object_store_uri, config.storage),
        delete=functools.partial(publish_deletion, config.kafka),
        on_close=[dead_letters.close],
        heartbeat_s=config.api.heartbeat_s,
        health_timeout_s=config.api.health_timeout_s,
        max_page=config.api.max_page,
        max_streams=config.api.max_streams,
        max_streams_per_tenant=config.api.max_streams_per_tenant,
        replays_per_minute=config.api.replays_per_minute,
        owns_store=True,
        stages=[stage.name for stage in pipeline.stages],
        search_kinds=[*SEARCHED_KINDS, *pipeline.searchable_kinds],
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
