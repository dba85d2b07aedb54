"""Named failures and their one mapping to HTTP: ``{"error": code, "detail": ...}``."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.metrics import REDIS_ERRORS
from api.responses import FastJSONResponse


class ApiError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra
        self.headers: dict[str, str] = {}


class InvalidRequest(ApiError):
    status, code = 422, "invalid_request"


class EventTooOld(InvalidRequest):
    code = "too_old"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class BodyTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class Conflict(ApiError):
    status, code = 409, "event_conflict"


class TooManyRequests(ApiError):
    status, code = 429, "rate_limited"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": str(retry_after)}


class ImplausibleEvent(ApiError):
    """Beyond a plausibility bound of a scoring rule: nothing was applied."""

    status, code = 422, "implausible"


class BoardNotFound(ApiError):
    status, code = 404, "board_not_found"


class GameNotFound(ApiError):
    status, code = 404, "game_not_found"


class ForbiddenGame(ApiError):
    status, code = 403, "forbidden_game"


class PlayerNotFound(ApiError):
    status, code = 404, "player_not_found"


class GenerationNotFound(ApiError):
    status, code = 404, "generation_not_found"


class GenerationExpired(ApiError):
    status, code = 410, "generation_expired"


class AwardsNotFound(ApiError):
    status, code = 404, "awards_not_found"


class SeasonNotFound(ApiError):
    status, code = 404, "season_not_found"


class SeasonNotClosed(ApiError):
    status, code = 409, "season_not_closed"


class AdjudicationClash(ApiError):
    status, code = 409, "adjudication_conflict"


class NotReady(ApiError):
    status, code = 503, "not_ready"


class LiveUnavailable(ApiError):
    """Redis is unreachable and the latest generation cannot answer this read."""

    status, code = 503, "unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": "1", "X-Live-Layer": "unavailable"}


def error_body(code: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"error": code, "detail": detail, **extra}


class ErrorOut(BaseModel):
    """Every error answer: a stable code, a human-readable detail, and sometimes
    more fields (``field`` of a 422, ``latestGeneration`` of a 410, ...)."""

    model_config = ConfigDict(extra="allow")
    error: str
    detail: str


def _described(text: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": text}


# OpenAPI ``responses=`` of the routers: the error shape and when each status occurs.
WRITE_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _described("missing, wrong or expired signature (X-Key-Id, X-Signature)"),
    409: _described("event_conflict: same eventId with different content"),
    413: _described("payload_too_large: body larger than LB_MAX_BODY_BYTES"),
    422: _described("invalid_request (names the field), too_old or implausible"),
    429: _described("rate_limited: see the Retry-After header"),
    503: _described(
        "unavailable: the outcome is unknown; redeliver the same event (safe)"
    ),
}
READ_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _described(
        "unauthorized: a token is missing, invalid or expired (friends; every read "
        "with LB_READ_AUTH=token)"
    ),
    404: _described("board_not_found, player_not_found or generation_not_found"),
    410: _described("generation_expired: the pinned generation is no longer kept"),
    422: _described("invalid_request: names the bad parameter"),
    429: _described("rate_limited (LB_READ_RATE_LIMIT): see the Retry-After header"),
    503: _described("unavailable: retry shortly"),
}

ADMIN_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _described("missing, wrong or expired signature"),
    403: _described("forbidden: a game-server key, not an LB_ADMIN_KEYS key"),
    404: _described("the season, event or player is not found"),
    409: _described("a conflicting decision or an ambiguous event id"),
    413: _described("payload_too_large"),
    422: _described("invalid_request: names the bad field"),
    503: _described("unavailable or not_ready: retry shortly"),
}
AWARDS_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: _described("awards_not_found: not a season board, or not closed yet"),
    422: _described("invalid_request: names the bad parameter"),
}
READY_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: _described("not_ready: Redis does not answer"),
}

# Where a Redis client error names the server: a unix socket path or any absolute
# path stays out of answers (it tells a client about the host's layout).
_PATHS = re.compile(r"(unix://)?(/[^\s:,;'\"]+)+")


def store_error_reason(exc: BaseException) -> str:
    """A short, path-free reason for a store failure, e.g. ``ConnectionError:
    Error 111 connecting to <redis>. Connection refused.``"""
    text = _PATHS.sub("<redis>", str(exc)).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _location(loc: tuple[Any, ...]) -> str:
    # Drop FastAPI's "body"/"query" prefix: clients know where they sent the field.
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> FastJSONResponse:
        return FastJSONResponse(
            error_body(exc.code, exc.detail, **exc.extra),
            status_code=exc.status,
            headers=exc.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> FastJSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid"}
        field = _location(tuple(first.get("loc", ())))
        return FastJSONResponse(
            error_body("invalid_request", f"{field}: {first.get('msg')}", field=field),
            status_code=422,
        )

    async def _unavailable(_: Request, exc: Exception) -> FastJSONResponse:
        # A write may have reached Redis before the connection failed or timed out
        # (a stalled server applies it when it resumes), so its outcome is unknown.
        # Redelivering the same event is safe: dedupe returns the saved result.
        REDIS_ERRORS.labels("request").inc()
        return FastJSONResponse(
            error_body(
                "unavailable",
                "store unavailable; the outcome of a write is unknown: redeliver "
                "the same event (same eventId and content), which is safe",
                reason=store_error_reason(exc),
            ),
            status_code=503,
            headers={"Retry-After": "1"},
        )

    app.add_exception_handler(RedisError, _unavailable)
    app.add_exception_handler(OSError, _unavailable)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> FastJSONResponse:
        codes = {404: "not_found", 405: "method_not_allowed"}
        return FastJSONResponse(
            error_body(codes.get(exc.status_code, "http_error"), str(exc.detail)),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )
