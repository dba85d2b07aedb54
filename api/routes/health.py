"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError
from starlette.responses import Response

from api.deps import SpeedDep
from api.errors import NotReady
from api.responses import FastJSONResponse

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def read_health() -> FastJSONResponse:
    """The process is alive."""
    return FastJSONResponse({"status": "ok"})


@router.get("/readyz")
async def read_readiness(speed: SpeedDep) -> FastJSONResponse:
    """Ready when Redis answers."""
    try:
        await speed.client.ping()
    except (RedisError, OSError) as exc:
        raise NotReady(f"redis unavailable: {exc}") from None
    return FastJSONResponse({"status": "ready"})


@router.get("/metrics")
async def read_metrics() -> Response:
    """Prometheus metrics of this process."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
