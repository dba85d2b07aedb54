"""Test helpers for the direct routes (api/direct.py): which requests FastAPI's
dependency injection handled, and apps whose direct routes use FastAPI's handler."""

from __future__ import annotations

from typing import Any

import fastapi.routing
import pytest

import api.direct


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
    """Apps built from now on answer every route with FastAPI's own handler
    (dependency solving and validation), the reference the direct one must equal."""
    monkeypatch.setattr(api.direct, "direct_handler", lambda dependant: None)
