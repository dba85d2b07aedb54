"""Test helpers for the direct routes (api/direct.py): which requests FastAPI's
dependency injection handled, and apps whose direct routes use FastAPI's handler."""

from __future__ import annotations

from typing import Any

import fastapi.routing
import pytest
from fastapi.routing import APIRoute, request_response

import api.direct
from api.routes import boards, score_events


def spy_injection(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The endpoints FastAPI solved dependencies for, in order, from now on."""
    solved: list[str] = []
    real = fastapi.routing.solve_dependencies

    async def spy(**kwargs: Any) -> Any:
        solved.append(kwargs["dependant"].call.__name__)
        return await real(**kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", spy)
    return solved


def without_direct_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the test ends, the direct routes answer with FastAPI's own handler
    (dependency solving and validation), the reference the direct one must equal:
    the app's own routes (api.direct.add_first) and those included later."""
    for route in [*boards.router.routes, *score_events.router.routes]:
        if isinstance(route, api.direct.DirectRoute):
            handler = APIRoute.get_route_handler(route)
            monkeypatch.setattr(route, "app", request_response(handler))
    monkeypatch.setattr(api.direct, "direct_handler", lambda dependant: None)
