"""Prometheus metrics, correct with several API workers.

Counters and histograms (events by outcome, rank latency by mode, Redis errors) are
per-process values; with ``PROMETHEUS_MULTIPROC_DIR`` set (``lb up`` sets it, see
:func:`prepare_multiprocess_dir`) prometheus-client keeps them in memory-mapped files
that ``/metrics`` sums over every worker, so whichever worker answers a scrape, the
totals are the service's. The variable must be set before prometheus-client is first
imported, which is why ``lb up`` passes it in the workers' environment.

State gauges (backlog, generation age, lag, changed players, last verify, seasons)
are not per process at all: each scrape reads them from Redis and the data dir
(:mod:`api.operations`), so every worker answers the same.
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import redis
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from redis.backoff import NoBackoff
from redis.retry import Retry
from starlette.requests import Request
from starlette.responses import Response

from api.heap import GcCallback
from api.operations import SEASON_STATES, OpsState, collect_state
from conf.boards import split_board
from conf.settings import Settings
from conf.stack_state import read_stack_state, restart_counts
from speed.connection import sync_client
from speed.server import resolve_redis_url

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MULTIPROC_SUBDIR = "prometheus"

EVENTS = Counter(
    "lb_events_total",
    "Score events by outcome: accepted, duplicate, superseded, late-review, "
    "quarantined, rejected",
    ["status"],
)
EVENTS_REJECTED = Counter(
    "lb_events_rejected_total", "Score events refused, by error code", ["error"]
)
# ``game``: the game a request addressed (API.md "Games"; ``default`` on the
# unprefixed paths): /v1/games/{g}/boards/... is routed as /v1/boards/{board}/...
REQUESTS = Counter(
    "lb_http_requests_total", "HTTP requests", ["route", "status", "game"]
)
LATENCY = Histogram(
    "lb_http_request_seconds", "HTTP request latency", ["route", "game"]
)
RANK_LATENCY = Histogram(
    "lb_rank_request_seconds",
    "Read latency by endpoint and mode (live, snapshot, approx)",
    ["endpoint", "mode"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
REDIS_ERRORS = Counter(
    "lb_redis_errors_total", "Requests that failed on Redis, by side", ["side"]
)
DEGRADED_READS = Counter(
    "lb_degraded_reads_total",
    "Live or approximate reads answered from the latest generation (Redis down)",
    ["endpoint"],
)
READ_CACHE = Counter(
    "lb_read_cache_total",
    "Read-cache lookups (api/reads.py): cache snapshot|live_top|approx_histogram, "
    "outcome hit|miss",
    ["cache", "outcome"],
)
READS_REFUSED = Counter(
    "lb_reads_refused_total",
    "Reads refused by LB_READ_AUTH / LB_READ_RATE_LIMIT (api/readers.py), by "
    "error code: unauthorized, rate_limited",
    ["error"],
)
GC_PAUSES = Histogram(
    "lb_gc_pause_seconds",
    "Python garbage-collector pauses in the API workers, by generation (0-2): a "
    "pause stops the worker's event loop, so every request it holds waits",
    ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)

EVENT_STATUSES = (
    "accepted",
    "duplicate",
    "superseded",
    "late-review",
    "quarantined",
    "rejected",
)
# Every known series exists from the start (at 0), so rates and alerts see them.
for _status in EVENT_STATUSES:
    EVENTS.labels(_status)
for _side in ("request", "read", "metrics"):
    REDIS_ERRORS.labels(_side)
for _refused in ("unauthorized", "rate_limited"):
    READS_REFUSED.labels(_refused)

READ_ENDPOINTS = {
    "/v1/boards/{board}/top": "top",
    "/v1/boards/{board}/players/{player_id}": "rank",
    "/v1/boards/{board}/players/{player_id}/nearby": "nearby",
    "/v1/boards/{board}/players/{player_id}/friends": "friends",
    "/v1/boards/{board}/entries": "entries",
}


class GcPauseTimer(GcCallback):
    """Times each collection of this process into :data:`GC_PAUSES` (a
    ``gc.callbacks`` entry). A latency spike of a read is then either a
    collection (seen here) or something outside the worker (CPU steal, another
    process): the read benchmark scrapes this around each phase."""

    def __init__(self) -> None:
        self._start = 0.0
        self._series = [GC_PAUSES.labels(str(g)) for g in range(3)]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self._series[info["generation"]].observe(time.perf_counter() - self._start)


def prepare_multiprocess_dir(settings: Settings) -> Path:
    """An empty directory for the workers' metric files, under the data dir's run
    directory; emptied at every start so values of a previous run never count."""
    path = (settings.run_dir / MULTIPROC_SUBDIR).resolve()
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def record_outcomes(statuses: Iterable[str]) -> None:
    # One inc per distinct status: a batch of 1000 costs a few label lookups.
    for status, count in collections.Counter(statuses).items():
        EVENTS.labels(status).inc(count)


def record_rejected(error: str, count: int = 1) -> None:
    EVENTS.labels("rejected").inc(count)
    EVENTS_REJECTED.labels(error).inc(count)


READ_MODES = frozenset(("live", "snapshot", "approx"))


def read_mode(endpoint: str, query_string: bytes) -> str:
    """The mode label of a ranked read: ``snapshot`` for entries pages and for any
    ``generation``, else the first ``mode`` (``live`` without one, ``invalid`` for
    another value), as ``parse_qs`` reads the query: blank values do not count. A
    plain query (no escape, no ``+``) is scanned without decoding it."""
    if endpoint == "entries":
        return "snapshot"
    if not query_string:
        return "live"
    if b"%" in query_string or b"+" in query_string:
        query = parse_qs(query_string.decode("latin-1"))
        if "generation" in query:
            return "snapshot"
        mode = query.get("mode", ["live"])[0]
    else:
        found: bytes | None = None
        for pair in query_string.split(b"&"):
            name, _, value = pair.partition(b"=")
            if not value:
                continue  # parse_qs drops a blank value, and a name alone
            if name == b"generation":
                return "snapshot"
            if name == b"mode" and found is None:
                found = value
        mode = "live" if found is None else found.decode("latin-1")
    return mode if mode in READ_MODES else "invalid"


class RequestSeries:
    """The per-request series (:data:`REQUESTS`, :data:`LATENCY`,
    :data:`RANK_LATENCY`), each label set's child looked up once: ``labels()``
    converts, checks and locks on every call, a few microseconds per request.
    Label sets are bounded: route templates (or ``unmatched``), statuses, modes and
    the boards file's games."""

    def __init__(self) -> None:
        self._requests: dict[tuple[str, int, str], Any] = {}
        self._latency: dict[tuple[str, str], Any] = {}
        self._reads: dict[tuple[str, str], Any] = {}

    def observe(
        self,
        route_path: str,
        status: int,
        query_string: bytes,
        seconds: float,
        game: str = "default",
    ) -> None:
        requests = self._requests.get((route_path, status, game))
        if requests is None:
            requests = REQUESTS.labels(route_path, str(status), game)
            self._requests[route_path, status, game] = requests
        requests.inc()
        latency = self._latency.get((route_path, game))
        if latency is None:
            latency = LATENCY.labels(route_path, game)
            self._latency[route_path, game] = latency
        latency.observe(seconds)
        endpoint = READ_ENDPOINTS.get(route_path)
        if endpoint is None:
            return
        key = (endpoint, read_mode(endpoint, query_string))
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = RANK_LATENCY.labels(*key)
        read.observe(seconds)


class StateCollector:
    """The gauges of one :class:`OpsState` (one scrape)."""

    def __init__(self, state: OpsState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        s = self.state
        up = GaugeMetricFamily("lb_redis_up", "1 when Redis answered this scrape")
        up.add_metric([], 0 if s.redis_error else 1)
        yield up
        backlog = GaugeMetricFamily(
            "lb_log_backlog",
            "Log positions handed out but not landed in Delta",
            labels=["partition"],
        )
        oldest = GaugeMetricFamily(
            "lb_oldest_unlanded_event_age_seconds",
            "Age of the oldest event not landed in Delta (0 when none)",
            labels=["partition"],
        )
        lag_pos = GaugeMetricFamily(
            "lb_generation_lag_positions",
            "Accepted log positions after the latest generation's boundary",
            labels=["partition"],
        )
        lag_s = GaugeMetricFamily(
            "lb_score_to_generation_lag_seconds",
            "Age of the oldest accepted event not in the latest generation (0: none)",
            labels=["partition"],
        )
        for p in s.partitions:
            label = [str(p.partition)]
            backlog.add_metric(label, p.backlog)
            oldest.add_metric(label, p.oldest_unlanded_age_seconds or 0.0)
            lag_pos.add_metric(label, p.generation_lag_positions)
            lag_s.add_metric(label, p.generation_lag_seconds or 0.0)
        yield from (backlog, oldest, lag_pos, lag_s)
        age = GaugeMetricFamily(
            "lb_generation_age_seconds", "Seconds since the latest generation's publish"
        )
        number = GaugeMetricFamily(
            "lb_generation_number", "Number of the latest generation (0: none)"
        )
        gen = s.generation or {}
        if gen.get("ageSeconds") is not None:
            age.add_metric([], gen["ageSeconds"])
        number.add_metric([], int(str(gen.get("id", "g0"))[1:] or 0))
        yield from (age, number)
        changed = GaugeMetricFamily(
            "lb_changed_players",
            "Players changed since the base generation, per board",
            labels=["board", "game"],
        )
        for board, count in s.changed_players.items():
            game, bare = split_board(board)
            changed.add_metric([bare, game], count)
        yield changed
        divergence = GaugeMetricFamily(
            "lb_verify_divergences", "Divergences found by the last lb verify"
        )
        last_run = GaugeMetricFamily(
            "lb_verify_last_run_timestamp_seconds", "When the last lb verify finished"
        )
        verify = s.last_verify
        if verify is not None:
            divergence.add_metric([], len(verify.get("divergences") or []))
            finished = verify.get("finished_at")
            if finished:
                last_run.add_metric([], datetime.fromisoformat(finished).timestamp())
        yield from (divergence, last_run)
        seasons = GaugeMetricFamily(
            "lb_season_state",
            "Season finalization state: 1 for the season's current state",
            labels=["season", "state", "game"],
        )
        for season in s.seasons:
            # Internal season ids (``arena~S4``): the season as its game names it.
            game, bare = split_board(season["season"])
            for state in SEASON_STATES:
                seasons.add_metric(
                    [bare, state, game], 1 if season["state"] == state else 0
                )
        yield seasons


class SupervisorCollector:
    """Restarts by `lb up`'s supervisor, from its state file (conf/stack_state.py):
    the API reads the file, it does not talk to the supervisor."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        restarts = CounterMetricFamily(
            "lb_supervisor_restarts",
            "Processes of the local stack restarted by its supervisor (lb up), "
            "by process: redis, api (API workers restarted by uvicorn included)",
            labels=["process"],
        )
        for process, count in restart_counts(
            read_stack_state(self.settings.run_dir)
        ).items():
            restarts.add_metric([process], count)
        yield restarts


def _sync_client(request: Request) -> redis.Redis:
    """One blocking client per app for scrapes; fails fast instead of retrying."""
    client = getattr(request.app.state, "metrics_redis", None)
    if client is None:
        settings: Settings = request.app.state.settings
        client = sync_client(
            resolve_redis_url(settings),
            socket_timeout=2,
            socket_connect_timeout=2,
            retry=Retry(NoBackoff(), 0),
        )
        request.app.state.metrics_redis = client
    return client


async def render_metrics(request: Request) -> Response:
    """This service's metrics: every worker's counters plus the state gauges."""
    app_state: Any = request.app.state
    state = await asyncio.to_thread(
        collect_state,
        app_state.settings,
        _sync_client(request),
        app_state.generations,
        app_state.boards,
    )
    gauges = CollectorRegistry(auto_describe=False)
    gauges.register(StateCollector(state))  # type: ignore[arg-type]
    gauges.register(SupervisorCollector(app_state.settings))  # type: ignore[arg-type]
    if state.redis_error:
        REDIS_ERRORS.labels("metrics").inc()
    if os.environ.get(MULTIPROC_ENV):
        merged = CollectorRegistry()
        MultiProcessCollector(merged)
        body = generate_latest(merged)
    else:
        body = generate_latest(REGISTRY)
    return Response(body + generate_latest(gauges), media_type=CONTENT_TYPE_LATEST)
