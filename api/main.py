"""Builds the FastAPI app: settings, Redis, speed layer, routers, error mapping."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from fastapi import FastAPI, Request, Response
from prometheus_client import Counter, Histogram
from redis.exceptions import RedisError

from api.live import LiveReader
from api.errors import error_body, install_error_handlers
from api.responses import FastJSONResponse
from api.routes import boards as boards_routes
from api.routes import health, score_events
from api.segments import GenerationRegistry
from conf.boards import load_boards
from conf.settings import Settings
from speed.server import resolve_redis_url
from speed.store import SpeedLayer

REQUESTS = Counter("lb_http_requests_total", "HTTP requests", ["route", "status"])
LATENCY = Histogram("lb_http_request_seconds", "HTTP request latency", ["route"])


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    boards = load_boards(settings.boards_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = aioredis.from_url(resolve_redis_url(settings), max_connections=256)
        app.state.speed = SpeedLayer(
            client,
            boards,
            settings.partitions,
            settings.retention_seconds,
            settings.rate_limit_bucket,
        )
        app.state.live = LiveReader(app.state.speed, app.state.generations)
        try:
            yield
        finally:
            await client.aclose()

    app = FastAPI(
        title="Leaderboard service",
        version="0.1.0",
        lifespan=lifespan,
        default_response_class=FastJSONResponse,
    )
    app.state.settings = settings
    app.state.boards = boards
    app.state.generations = GenerationRegistry(
        settings.segments_dir, settings.retained_generations
    )
    install_error_handlers(app)

    @app.middleware("http")
    async def observe(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except (RedisError, OSError) as exc:
            # The store being unreachable is not the client's fault and loses nothing:
            # nothing was acknowledged, so the client retries.
            response = FastJSONResponse(
                error_body("unavailable", f"store unavailable: {exc}"), status_code=503
            )
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        REQUESTS.labels(path, str(response.status_code)).inc()
        LATENCY.labels(path).observe(time.perf_counter() - started)
        return response

    app.include_router(health.router)
    app.include_router(score_events.router)
    app.include_router(boards_routes.router)
    return app
