"""A direct path for the score-event writes, in front of FastAPI's router.

A profile of single POSTs at 500 requests/s (bench/RESULTS.md, "Ingest: the API's
CPU per event") showed FastAPI's per-request machinery -- route matching,
dependency solving (``solve_dependencies`` alone ~15 % of the API's CPU) and its
exception wrapping -- costing about as much as the write itself. The two write
routes take no parameters FastAPI validates: they read the raw body (its signature
covers the exact bytes) and the app's state. So this ASGI layer calls the same route
functions of :mod:`api.routes.score_events` with that state, and answers their
exceptions with the app's own exception handlers, as Starlette's
``ExceptionMiddleware`` would. Anything else (another path or method, a mounted
root path) goes to FastAPI unchanged; the routes stay the contract and the OpenAPI
schema (tests/api/test_fast_writes.py compares the two paths byte for byte).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api.routes import score_events

Handler = Callable[..., Awaitable[Response]]
# Path -> the route function FastAPI would call for a POST to it.
WRITES: dict[str, Handler] = {
    "/v1/score-events": score_events.submit_score_event,
    "/v1/score-events:batch": score_events.submit_score_event_batch,
}


def route_of(scope: Scope) -> Handler | None:
    """The write route a request goes to, or None when FastAPI takes it."""
    if scope["method"] != "POST" or scope.get("root_path"):
        return None
    return WRITES.get(scope["path"])


def exception_handler(app: Any, exc: Exception) -> Callable[..., Any] | None:
    """The handler Starlette's ExceptionMiddleware would pick for ``exc``: the
    app's handler of the nearest class in its MRO, except the catch-all
    ``Exception`` one, which belongs to ServerErrorMiddleware further out (an
    exception without a handler is re-raised to it, as FastAPI's stack does)."""
    handlers = app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        handler = handlers.get(cls)
        if handler is not None:
            return handler  # type: ignore[no-any-return]
    return None


class FastWrites:
    """ASGI middleware: the two write routes called directly, everything else
    passed on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The routes' objects, for ObserveMiddleware's route label.
        self._routes: dict[str, Any] = {
            path: route
            for route in score_events.router.routes
            if (path := getattr(route, "path", None)) in WRITES
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = route_of(scope) if scope["type"] == "http" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = self._routes[scope["path"]]
        app = scope["app"]
        state = app.state
        request = Request(scope, receive, send)
        try:
            response = await handler(request, state.settings, state.boards, state.speed)
        except Exception as exc:
            on_error = exception_handler(app, exc)
            if on_error is None:
                raise
            response = on_error(request, exc)
            if inspect.isawaitable(response):
                response = await response
        await response(scope, receive, send)
