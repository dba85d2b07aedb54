"""Games (API.md "Games"): the game-scoped paths, mapped onto the game default's.

A game is a namespace of boards. :class:`GamePaths` is plain ASGI in front of the
router: ``/v1/games/{g}/boards/{board}/...`` is dispatched as
``/v1/boards/{qualify(g, board)}/...`` and ``/v1/games/{g}/score-events[:batch]`` as
``/v1/score-events[:batch]`` with the game in the request's state
(:func:`game_of`), so every route, cache, Redis key and generation works on the
internal board ids of :func:`conf.boards.qualify` unchanged; answers name the board
as the client did (:func:`conf.boards.split_board`). ``GET /v1/games`` lists the
games; an unknown game answers 404 ``game_not_found``. The unprefixed paths are the
game ``default``: an internal id of another game (``arena~...``) is no board there.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import BoardNotFound, GameNotFound, error_body
from api.responses import FastJSONResponse
from conf.boards import DEFAULT_GAME, GAME_SEP, BoardsConfig, qualify

STATE_KEY = "lb_game"
GAMES_PREFIX = "/v1/games"
BOARDS_PREFIX = "/v1/boards/"


def game_of(scope_or_state: Any) -> str:
    """The game a request addresses (``default`` on the unprefixed paths)."""
    state = scope_or_state.get("state") if isinstance(scope_or_state, dict) else None
    if state is None:
        return DEFAULT_GAME
    return state.get(STATE_KEY, DEFAULT_GAME)  # type: ignore[no-any-return]


def games_body(config: BoardsConfig) -> dict[str, Any]:
    return {
        "games": [
            {
                "game": game,
                "regions": boards.regions,
                "seasons": [s.id for s in boards.seasons],
            }
            for game, boards in config.each_game()
        ]
    }


class GamePaths:
    """Maps the game-scoped paths onto the unprefixed ones (module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(BOARDS_PREFIX) and GAME_SEP in path:
            board = path[len(BOARDS_PREFIX) :].partition("/")[0]
            if GAME_SEP in board:
                await _refuse(
                    scope, receive, send, BoardNotFound(f"no board {board!r}")
                )
                return
        if not path.startswith(GAMES_PREFIX) or (
            len(path) > len(GAMES_PREFIX) and path[len(GAMES_PREFIX)] != "/"
        ):
            await self.app(scope, receive, send)
            return
        config: BoardsConfig = scope["app"].state.boards
        rest = path[len(GAMES_PREFIX) :].strip("/")
        if not rest:
            if scope["method"] in ("GET", "HEAD"):
                await FastJSONResponse(games_body(config))(scope, receive, send)
                return
            await self.app(scope, receive, send)  # 405/404 as the router says
            return
        game, _, tail = rest.partition("/")
        if config.game(game) is None:
            await _refuse(scope, receive, send, GameNotFound(f"no game {game!r}"))
            return
        if tail == "boards" or tail.startswith("boards/"):
            board, sep, after = tail[len("boards/") :].partition("/")
            if board and GAME_SEP in board:
                await _refuse(
                    scope, receive, send, BoardNotFound(f"no board {board!r}")
                )
                return
            target = "/v1/boards"
            if board:
                target += "/" + qualify(game, board) + sep + after
            elif tail.endswith("/"):
                target += "/"
        elif tail in ("score-events", "score-events:batch"):
            target = "/v1/" + tail
        else:
            target = "/v1/games/" + game + "/" + tail  # no such route: 404
        # In place: the outer middlewares read the route the router sets on it.
        scope["path"] = target
        scope["raw_path"] = quote(target, safe="/:@~!$&'()*+,;=-._").encode()
        scope.setdefault("state", {})[STATE_KEY] = game
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, exc: Any) -> None:
    body = error_body(exc.code, exc.detail)
    await FastJSONResponse(body, status_code=exc.status)(scope, receive, send)


GAME_PARAMETER = {
    "name": "gameId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[a-z0-9-]{1,32}$", "title": "Gameid"},
    "description": 'A game the boards file lists ("default" without games:)',
}
GAMES_SCHEMA = {
    "title": "GamesOut",
    "type": "object",
    "required": ["games"],
    "properties": {
        "games": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["game", "regions", "seasons"],
                "properties": {
                    "game": {"type": "string"},
                    "regions": {"type": "array", "items": {"type": "string"}},
                    "seasons": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}
GAME_NOT_FOUND = {
    "description": "game_not_found: the boards file lists no such game",
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}
    },
}


def document_games(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI ``document`` with the game-scoped paths :class:`GamePaths` maps
    (plain ASGI, so FastAPI does not see them): ``GET /v1/games`` and, for every
    ``/v1/boards...`` and ``/v1/score-events...`` operation, its copy under
    ``/v1/games/{gameId}`` with the game's path parameter and 404
    ``game_not_found``."""
    paths: dict[str, Any] = document.setdefault("paths", {})
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("GamesOut", GAMES_SCHEMA)
    scoped: dict[str, Any] = {}
    for path, item in paths.items():
        if not (path.startswith("/v1/boards") or path.startswith("/v1/score-events")):
            continue
        copied: dict[str, Any] = {}
        for method, operation in item.items():
            op = dict(operation)
            op["parameters"] = [GAME_PARAMETER, *operation.get("parameters", [])]
            op["responses"] = dict(operation.get("responses", {}))
            if "ErrorOut" in schemas:
                op["responses"].setdefault("404", GAME_NOT_FOUND)
            if "operationId" in op:
                op["operationId"] = f"{op['operationId']}_game"
            op["summary"] = f"{operation.get('summary', '')} (game-scoped)".strip()
            copied[method] = op
        scoped[GAMES_PREFIX + "/{gameId}" + path[len("/v1") :]] = copied
    paths[GAMES_PREFIX] = {
        "get": {
            "summary": "The games this deployment serves",
            "operationId": "list_games",
            "tags": ["boards"],
            "responses": {
                "200": {
                    "description": "Each game with its regions and seasons",
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/GamesOut"}
                        }
                    },
                }
            },
        }
    }
    paths.update(scoped)
    return document
