"""Routes for operators' tools: health, Prometheus metrics and the pipeline's stages."""

import asyncio

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from api.dependencies import Context, caller_tenant
from api.errors import ApiError
from api.models import ErrorBody, Health, Stages
from core.errors import ReelsenseError

_HEALTH_PROBE_ID = "healthz-probe"  # any id: reading a missing record proves the store answers

operation_routes = APIRouter(tags=["operations"])


@operation_routes.get("/healthz", responses={503: {"model": ErrorBody}})
async def healthz(context: Context) -> Health:
    """200 when the checkpoint store answers; 503 otherwise."""
    try:
        await asyncio.wait_for(
            context.store.get(_HEALTH_PROBE_ID), timeout=context.health_timeout_s
        )
    except TimeoutError:
        raise ApiError(503, "store_unavailable", "the checkpoint store timed out") from None
    except ReelsenseError as exc:
        raise ApiError(503, "store_unavailable", f"{exc.code}: {exc.message}") from None
    except OSError as exc:  # an adapter that let a socket error through
        raise ApiError(503, "store_unavailable", str(exc)) from None
    return Health()


@operation_routes.get("/metrics", response_class=Response)
async def metrics() -> Response:
    """Prometheus text exposition of this process's default registry."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


@operation_routes.get(
    "/v1/stages", dependencies=[Depends(caller_tenant)], responses={401: {"model": ErrorBody}}
)
async def stages(context: Context) -> Stages:
    """Every stage of the pipeline, in the order they run: the order the dashboard lays out a
    video's stages in."""
    return Stages(stages=list(context.stages))
