"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from redis.exceptions import RedisError
from starlette.responses import Response

from api.deps import SettingsDep, SpeedDep
from api.errors import READY_ERROR_RESPONSES, NotReady, store_error_reason
from api.metrics import render_metrics
from api.models import TEXT_RESPONSE, StatusOut
from api.responses import FastJSONResponse
from conf.settings import Settings

router = APIRouter(tags=["health"])


def _instance(settings: Settings) -> dict[str, str]:
    token = settings.instance_token
    return {"instance": token} if token else {}


@router.get("/healthz", response_model=StatusOut)
async def read_health(settings: SettingsDep) -> FastJSONResponse:
    """The process is alive; ``instance`` names the `lb up` that started it."""
    return FastJSONResponse({"status": "ok", **_instance(settings)})


@router.get("/readyz", response_model=StatusOut, responses=READY_ERROR_RESPONSES)
async def read_readiness(
    speed: SpeedDep, settings: SettingsDep, request: Request
) -> FastJSONResponse:
    """Ready when Redis answers (writes can be acknowledged); ``instance`` lets
    `lb up` tell its own API apart. While Redis is down the answer is 503 and says
    what still works: reads from the latest generation (``basis: snapshot``), so a
    load balancer should route reads on /healthz and writes on /readyz."""
    try:
        await speed.client.ping()
    except (RedisError, OSError) as exc:
        latest = request.app.state.generations.latest()
        reads = (
            f"reads answer from generation {latest.id} (basis: snapshot)"
            if latest is not None
            else "no generation is published, so live reads answer 503 too"
        )
        raise NotReady(
            f"redis unavailable: {store_error_reason(exc)}; writes answer 503, "
            + reads,
            **_instance(settings),
        ) from None
    return FastJSONResponse({"status": "ready", **_instance(settings)})


@router.get("/metrics", response_class=Response, responses=TEXT_RESPONSE)
async def read_metrics(request: Request) -> Response:
    """Prometheus metrics of the service (every worker) and its state gauges."""
    return await render_metrics(request)
