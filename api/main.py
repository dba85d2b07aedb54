"""Builds the FastAPI app: settings, Redis, speed layer, routers, error mapping."""

from __future__ import annotations

import gc
import inspect
import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from api.direct import add_first
from api.errors import install_error_handlers
from api.games import GamePaths, document_games
from api.heap import SurvivorFreezer, desynchronized_threshold
from api.history import HistoryService
from api.metrics import GcPauseTimer
from api.middleware import ApiMiddleware
from api.models import with_body_schemas
from api.reads import ReadService
from api.responses import FastJSONResponse
from api.routes import (
    admin,
    awards,
    flags,
    friends,
    health,
    histogram,
    history,
    profiles,
    quarantine,
    score_events,
    web,
)
from api.routes import boards as boards_routes
from api.tokens import TokenVerifier
from conf.boards import load_boards
from conf.rule_state import RuleStateWatcher
from conf.rules import default_registry
from conf.settings import LOCAL_DEV_KEYS, Settings, load_settings
from serving.registry import GenerationRegistry, quarantine_thresholds
from speed.baserows import registry_lookup
from speed.connection import async_client
from speed.friends import FriendsReader
from speed.live import LiveReader, generation_warmer
from speed.profiles import watch_endpoint
from speed.readers import ReadLimiter
from speed.server import resolve_redis_url
from speed.store import SpeedLayer

log = logging.getLogger("leaderboard.api")
# FastAPI's native OpenTelemetry, documented as FastAPI(telemetry={...}), is on by
# default: each request asks the three global OpenTelemetry providers (an
# os.environ lookup each) whether one is configured, and traces, meters and logs
# the request once one is. The service's metrics are Prometheus (api/metrics.py).
NO_TELEMETRY: dict[str, bool] = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
}


def telemetry_off() -> dict[str, Any]:
    """FastAPI's keyword that switches its telemetry off, where it has one: the
    Airflow venv pins an older FastAPI (no ``fastapi.telemetry``) and builds the app
    for the season-close DAG's award check (``api.served``)."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": NO_TELEMETRY}


def warn_about_dev_key(settings: Settings) -> bool:
    """One loud start-up warning when the public dev key signs writes (not in a demo).

    Production refuses that key outright (``Settings``); elsewhere it is allowed for
    local use, but anyone who read the README can then sign scores.
    """
    if not settings.uses_dev_key or settings.demo:
        return False
    log.warning(
        "!!! LB_HMAC_KEYS accepts the public development key %r: anyone can sign "
        "score events. Set LB_HMAC_KEYS to your own keyId:secret pairs (and "
        "LB_PRODUCTION=true outside local use). !!!",
        LOCAL_DEV_KEYS,
    )
    return True


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    # Seasons promoted to another scoring rule (lb replay --promote) score under it,
    # also when the promotion happens while this process runs (api/rule_reload.py).
    rule_watcher = RuleStateWatcher(
        load_boards(settings.boards_file), settings.data_dir
    )
    warn_about_dev_key(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Short timeouts: a dead or stalled Redis turns into degraded reads (the
        # latest generation, api/degraded.py) and 503 writes within about a
        # second or two, instead of redis-py's 5 s defaults.
        redis_url = resolve_redis_url(settings)
        client = async_client(
            redis_url,
            max_connections=256,
            socket_connect_timeout=settings.redis_connect_timeout,
            socket_timeout=settings.redis_timeout,
        )
        app.state.speed = SpeedLayer(
            client,
            app.state.boards,
            settings.partitions,
            settings.record_ttl_seconds,
            settings.rate_limit_bucket,
            default_registry(settings.points_min, settings.points_max),
        )
        app.state.speed.group_window_us = settings.group_commit_us
        if settings.replica_acks > 0:
            app.state.speed.replica_wait = (
                settings.replica_acks,
                settings.replica_ack_timeout_ms,
            )
        app.state.speed.key_rate_limit = settings.key_rate_limit_bucket
        read_limit = settings.read_rate_limit_bucket
        app.state.read_limiter = (
            ReadLimiter(client, read_limit) if read_limit is not None else None
        )
        # The owner transaction names players' rows in their partition's base.
        app.state.speed.base_generations = registry_lookup(app.state.generations)
        app.state.live = LiveReader(app.state.speed, app.state.generations)
        # A newer generation is prepared off the event loop before it is the latest.
        app.state.generations.warmer = generation_warmer(settings.partitions)
        app.state.friends = FriendsReader(app.state.live)
        app.state.reads = ReadService(
            app.state.boards,
            app.state.generations,
            app.state.live,
            app.state.friends,
            settings.data_dir,
            settings.live_cache_ms,
        )
        app.state.reads.profile_cache.watch.start(watch_endpoint(redis_url, client))
        app.state.speed.thresholds = lambda: quarantine_thresholds(
            app.state.generations
        )
        # Everything built so far lives as long as the process: keep it out of the
        # cyclic collector's full passes, whose pauses show up as latency spikes.
        gc.collect()
        gc.freeze()
        # Not at the same moments as the other workers (api/heap.py).
        gc.set_threshold(
            desynchronized_threshold(random.Random()), *gc.get_threshold()[1:]
        )
        # And what it builds while serving, after each full collection (api/heap.py).
        freezer = SurvivorFreezer()
        freezer.install()
        gc_timer = GcPauseTimer()
        gc_timer.install()
        try:
            yield
        finally:
            gc_timer.remove()
            freezer.remove()
            await app.state.reads.profile_cache.watch.stop()
            await client.aclose()

    app = FastAPI(
        title="Leaderboard service",
        version="0.1.0",
        lifespan=lifespan,
        default_response_class=FastJSONResponse,
        **telemetry_off(),
    )
    app.state.settings = settings
    app.state.rule_watcher = rule_watcher
    app.state.boards = rule_watcher.boards
    app.state.generations = GenerationRegistry(
        settings.segments_dir, settings.retained_generations
    )
    # Bearer tokens of every read (api/readers.py) and of the own reads and friends.
    app.state.token_verifier = TokenVerifier(settings.player_token_secret)
    app.state.read_limiter = None
    # Why a rank changed (api/history.py): history and diff over the generations.
    app.state.history = HistoryService(
        lambda: app.state.boards,
        app.state.generations,
        settings.data_dir,
        settings.partitions,
    )
    install_error_handlers(app)

    # Innermost: the game-scoped paths onto the game default's (api/games.py).
    app.add_middleware(GamePaths)
    # One middleware in front of the router (api/middleware.py): metrics, rule
    # reload and, with LB_READ_AUTH=token, the gate of every read.
    app.add_middleware(ApiMiddleware, gate_reads=settings.read_auth == "token")
    # The hot reads and the writes: the app's own routes, first (api/direct.py).
    add_first(app, boards_routes.router, score_events.router, history.router)
    app.include_router(health.router)
    app.include_router(awards.router)
    app.include_router(admin.router)
    app.include_router(friends.router)
    app.include_router(profiles.router)
    app.include_router(flags.router)
    app.include_router(quarantine.router)
    app.include_router(histogram.router)
    web.install(app)  # the page at / and its assets under /web/

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_games(with_body_schemas(FastAPI.openapi(app)))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
