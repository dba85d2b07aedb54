"""The API's one middleware (api/middleware.py) and what no longer runs per request
(issue 22 item 3): one plain-ASGI middleware of ours in the stack, no
BaseHTTPMiddleware, the read gate not asked when reads are open, FastAPI's native
telemetry off; the request metrics still count every answer, refusals and 500s
included. In-process, no Redis: the requests here need none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from starlette.middleware.base import BaseHTTPMiddleware

import api.middleware
from api.games import GamePaths
from api.main import create_app
from api.middleware import ApiMiddleware
from tests.support.settings import base_settings

pytestmark = pytest.mark.unit
UNREACHABLE = "redis://127.0.0.1:1/0"  # never connected: no lifespan runs here


def app_with(tmp_path: Path, **overrides: Any) -> FastAPI:
    return create_app(base_settings(UNREACHABLE, tmp_path, **overrides))


def requests_total(route: str, status: int) -> float:
    labels = {"route": route, "status": str(status), "game": "default"}
    return REGISTRY.get_sample_value("lb_http_requests_total", labels) or 0.0


def stack_of(app: FastAPI) -> list[Any]:
    layers, layer = [], app.build_middleware_stack()
    while layer is not None and layer is not app.router:
        layers.append(layer)
        layer = getattr(layer, "app", None)
    return layers


def test_one_middleware_of_ours_and_no_base_http_middleware(tmp_path: Path) -> None:
    app = app_with(tmp_path)
    # Outermost first: ours, then the game-scoped paths' rewrite onto the router's.
    assert [m.cls for m in app.user_middleware] == [ApiMiddleware, GamePaths]
    layers = stack_of(app)
    assert sum(isinstance(layer, ApiMiddleware) for layer in layers) == 1
    assert not any(isinstance(layer, BaseHTTPMiddleware) for layer in layers)


def test_fastapi_telemetry_is_not_asked_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On by default, FastAPI's telemetry asks the global OpenTelemetry providers on
    every request (and traces it once one is configured); switched off, never."""
    from opentelemetry import _logs, metrics, trace

    asked: list[str] = []
    for module, name in (
        (trace, "get_tracer_provider"),
        (metrics, "get_meter_provider"),
        (_logs, "get_logger_provider"),
    ):
        real = getattr(module, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            asked.append(_name)
            return _real(*args)

        monkeypatch.setattr(module, name, spy)
    client = TestClient(app_with(tmp_path))
    assert client.get("/v1/boards/x/nothing-here").status_code == 404
    assert client.get("/no-such-path").status_code == 404
    assert asked == []


def test_open_reads_do_not_ask_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    real_is_read, real_refusal = api.middleware.is_read, api.middleware.refusal

    def is_read(method: str, path: str) -> bool:
        asked.append(path)
        return real_is_read(method, path)

    async def refusal(scope: Any) -> Any:
        asked.append("refusal")
        return await real_refusal(scope)

    monkeypatch.setattr(api.middleware, "is_read", is_read)
    monkeypatch.setattr(api.middleware, "refusal", refusal)
    path = "/v1/boards/x/nothing-here"
    assert TestClient(app_with(tmp_path)).get(path).status_code == 404
    assert asked == []
    # Token reads: the gate judges the read and refuses it without a token.
    reply = TestClient(app_with(tmp_path, read_auth="token")).get(path)
    assert reply.status_code == 401
    assert reply.json()["error"] == "unauthorized"
    assert reply.headers["www-authenticate"] == "Bearer"
    assert asked == [path, "refusal"]


def test_refusals_and_failures_are_counted(tmp_path: Path) -> None:
    """A refused read counts as ``unmatched`` (it never reached the router), a
    failure as 500 under its route, as with the three middlewares before."""
    gated = TestClient(app_with(tmp_path, read_auth="token"))
    before = requests_total("unmatched", 401)
    assert gated.get("/v1/boards/x/nothing-here").status_code == 401
    assert requests_total("unmatched", 401) - before == 1

    app = app_with(tmp_path)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    before = requests_total("/boom", 500)
    reply = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert reply.status_code == 500
    assert requests_total("/boom", 500) - before == 1
