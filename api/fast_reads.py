"""A direct path for the hot ranked reads, in front of FastAPI's router.

Profiles of the read benchmark (bench/RESULTS.md, issue 13) showed FastAPI's
per-request machinery -- route matching over every route, dependency solving and
per-parameter validation -- taking about two thirds of the API's CPU for a cached
top-100, more than the read itself. This ASGI layer answers the three hot reads
(``top``, player ``rank``, ``nearby``) when the request is plainly well formed, by
calling the same :class:`api.reads.ReadService` method the route calls and sending
the same bytes and headers. Anything it is not sure about -- another path or method,
an unknown, repeated, blank or escaped query parameter, a value FastAPI would have
to coerce or refuse, a read that fails with something other than an
:class:`api.errors.ApiError` -- goes to FastAPI unchanged, so the routes in
:mod:`api.routes.boards` stay the contract and the only place input is refused
(tests/api/test_fast_reads.py compares the two paths).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import ApiError, Unauthorized, error_body
from api.reads import Answer, ReadService
from api.responses import EncodedResponse, FastJSONResponse
from api.routes import boards as boards_routes
from api.tokens import player_of

PREFIX = "/v1/boards/"
MODES = frozenset(("live", "snapshot", "approx"))
# Canonical decimals only; "+5", " 5", "05" or "5.0" are FastAPI's to judge.
_NUMBER = re.compile(r"(?:0|[1-9][0-9]{0,3})")
# The route templates, for the metrics' route label (api/main.py ObserveMiddleware).
TOP = "/v1/boards/{board}/top"
RANK = "/v1/boards/{board}/players/{player_id}"
NEARBY = "/v1/boards/{board}/players/{player_id}/nearby"


class FallThrough(Exception):
    """Not a request this path answers: FastAPI takes it."""


def _number(value: str, low: int, high: int) -> int:
    if not _NUMBER.fullmatch(value):
        raise FallThrough
    number = int(value)
    if not low <= number <= high:
        raise FallThrough
    return number


def _query(raw: bytes, allowed: frozenset[str]) -> dict[str, str]:
    """Parameters of a plain query string: known names, each once, non-empty, no
    escapes (FastAPI's parser decides everything else)."""
    if not raw:
        return {}
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise FallThrough from None
    if "%" in text or "+" in text:
        raise FallThrough
    params: dict[str, str] = {}
    for pair in text.split("&"):
        name, sep, value = pair.partition("=")
        if not sep or not value or name not in allowed or name in params:
            raise FallThrough
        params[name] = value
    return params


def _mode(params: dict[str, str]) -> str:
    mode = params.get("mode", "live")
    if mode not in MODES:
        raise FallThrough
    return mode


def _generation(params: dict[str, str]) -> str | None:
    generation = params.get("generation")
    if generation is not None and len(generation) > 32:
        raise FallThrough
    return generation


def _player(value: str) -> str:
    # PlayerIdPath: the id in NFC, as writes store it.
    return value if value.isascii() else unicodedata.normalize("NFC", value)


def _viewer(scope: Scope) -> str | None:
    """api.deps.get_viewer: the player a valid bearer token names, else None."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            if not value:
                return None
            try:
                text = value.decode("latin-1")
                secret = scope["app"].state.settings.player_token_secret
                return player_of(text, secret)
            except Unauthorized:
                return None
    return None


TOP_PARAMS = frozenset(("limit", "mode", "generation"))
RANK_PARAMS = frozenset(("mode", "generation"))
NEARBY_PARAMS = frozenset(("radius", "mode", "generation"))


def plan(scope: Scope) -> tuple[str, Callable[[ReadService], Any]]:
    """(route template, the read to run) for a request this path answers."""
    if scope["method"] != "GET" or scope.get("root_path"):
        raise FallThrough
    path: str = scope["path"]
    if not path.startswith(PREFIX):
        raise FallThrough
    parts = path[len(PREFIX) :].split("/")
    if not all(parts):
        raise FallThrough
    query = scope.get("query_string", b"")
    if len(parts) == 2 and parts[1] == "top":
        params = _query(query, TOP_PARAMS)
        board = parts[0]
        limit = _number(params.get("limit", "100"), 1, 1000)
        mode, generation = _mode(params), _generation(params)
        return TOP, lambda reads: reads.top(board, limit, mode, generation)  # type: ignore[arg-type]
    if len(parts) in (3, 4) and parts[1] == "players":
        board, player = parts[0], _player(parts[2])
        if len(parts) == 3:
            params = _query(query, RANK_PARAMS)
            mode, generation = _mode(params), _generation(params)
            viewer = _viewer(scope)
            return RANK, lambda reads: reads.rank(
                board,
                player,
                mode,  # type: ignore[arg-type]
                generation,
                viewer,
            )
        if parts[3] == "nearby":
            params = _query(query, NEARBY_PARAMS)
            radius = _number(params.get("radius", "5"), 0, 100)
            mode, generation = _mode(params), _generation(params)
            viewer = _viewer(scope)
            return NEARBY, lambda reads: reads.nearby(
                board,
                player,
                radius,
                mode,  # type: ignore[arg-type]
                generation,
                viewer,
            )
    raise FallThrough


class FastReads:
    """ASGI middleware: the hot reads answered directly, everything else passed on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The routes' objects, for ObserveMiddleware's route label.
        self._routes: dict[str, Any] = {
            path: route
            for route in boards_routes.router.routes
            if (path := getattr(route, "path", None)) in (TOP, RANK, NEARBY)
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            template, read = plan(scope)
            reads: ReadService = scope["app"].state.reads
            answer: Answer = await read(reads)
        except FallThrough:
            await self.app(scope, receive, send)
            return
        except ApiError as exc:
            # What api.errors' ApiError handler answers.
            scope["route"] = self._routes[template]
            response: Any = FastJSONResponse(
                error_body(exc.code, exc.detail, **exc.extra),
                status_code=exc.status,
                headers=exc.headers,
            )
            await response(scope, receive, send)
            return
        except Exception:  # noqa: BLE001 - FastAPI's handlers answer it as before
            await self.app(scope, receive, send)
            return
        scope["route"] = self._routes[template]
        await EncodedResponse(answer.body, headers=answer.headers)(scope, receive, send)
