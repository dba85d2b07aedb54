"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from redis.exceptions import RedisError
from starlette.responses import Response

from api.deps import SpeedDep
from api.errors import NotReady
from api.metrics import render_metrics
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
async def read_metrics(request: Request) -> Response:
    """Prometheus metrics of the service (every worker) and its state gauges."""
    return await render_metrics(request)
