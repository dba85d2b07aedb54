"""Errors of the leaderboard service as exceptions.

Every error answer is JSON ``{"error": "<code>", "detail": "..."}``; the client
raises the class of its code (or, for a code it does not know, of its HTTP status),
carrying ``code``, ``status``, ``detail`` and the whole ``body``.
"""

from __future__ import annotations

from typing import Any


class LeaderboardError(Exception):
    """An error answer of the service (or, for :class:`OutcomeUnknown`, none)."""

    status: int | None = None
    code: str = "error"

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        status: int | None = None,
        body: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.body: dict[str, Any] = body or {}
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.detail}"


class Unauthorized(LeaderboardError):
    """401: a missing, wrong or expired signature or player token."""

    status, code = 401, "unauthorized"


class Forbidden(LeaderboardError):
    """403: authenticated, not allowed (a game key on an admin call, another
    player's token, a game the key may not write)."""

    status, code = 403, "forbidden"


class NotFound(LeaderboardError):
    """404: board_not_found, player_not_found, awards_not_found, game_not_found..."""

    status, code = 404, "not_found"


class EventConflict(LeaderboardError):
    """409 event_conflict: the same eventId was sent with different content."""

    status, code = 409, "event_conflict"


class Conflict(LeaderboardError):
    """409 with another code (e.g. season_not_closed)."""

    status, code = 409, "conflict"


class GenerationExpired(LeaderboardError):
    """410: the pinned generation is no longer retained (``latest_generation``)."""

    status, code = 410, "generation_expired"

    @property
    def latest_generation(self) -> str | None:
        value = self.body.get("latestGeneration")
        return str(value) if value is not None else None


class PayloadTooLarge(LeaderboardError):
    status, code = 413, "payload_too_large"


class Invalid(LeaderboardError):
    """422: invalid_request (``field`` names what is wrong), too_old, implausible."""

    status, code = 422, "invalid_request"

    @property
    def field(self) -> str | None:
        value = self.body.get("field")
        return str(value) if value is not None else None


class TooOld(Invalid):
    """422 too_old: ``occurredAt`` is older than the dedupe window."""

    code = "too_old"


class Implausible(Invalid):
    """422 implausible: beyond the scoring rule's plausibility bounds."""

    code = "implausible"


class RateLimited(LeaderboardError):
    """429: ``retry_after`` seconds (the Retry-After header) before trying again."""

    status, code = 429, "rate_limited"


class OutcomeUnknown(LeaderboardError):
    """A write whose outcome is unknown after every attempt (503s, timeouts, lost
    connections): it may or may not have been applied. Redelivering the same event
    later (same eventId and content) is always safe.

    From ``submit_batch``: ``completed`` holds the items of the requests that were
    answered before this one (redelivering the whole list is safe too)."""

    code = "outcome_unknown"
    completed: list[Any] | None = None


class Unavailable(OutcomeUnknown):
    """503 unavailable / not_ready after the last attempt."""

    status, code = 503, "unavailable"


_BY_CODE: dict[str, type[LeaderboardError]] = {
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "forbidden_game": Forbidden,
    "board_not_found": NotFound,
    "player_not_found": NotFound,
    "awards_not_found": NotFound,
    "game_not_found": NotFound,
    "generation_not_found": NotFound,
    "season_not_found": NotFound,
    "not_found": NotFound,
    "event_conflict": EventConflict,
    "generation_expired": GenerationExpired,
    "payload_too_large": PayloadTooLarge,
    "invalid_request": Invalid,
    "too_old": TooOld,
    "implausible": Implausible,
    "rate_limited": RateLimited,
    "unavailable": Unavailable,
    "not_ready": Unavailable,
}
_BY_STATUS: dict[int, type[LeaderboardError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: GenerationExpired,
    413: PayloadTooLarge,
    422: Invalid,
    429: RateLimited,
    503: Unavailable,
}


def error_for(
    status: int | None,
    body: dict[str, Any],
    retry_after: float | None = None,
) -> LeaderboardError:
    """The exception of an error answer (``status`` None: a batch item's error)."""
    code = str(body.get("error") or "error")
    detail = str(body.get("detail") or code)
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status or 0, LeaderboardError)
    if retry_after is None and isinstance(body.get("retryAfter"), int | float):
        retry_after = float(body["retryAfter"])
    return cls(
        detail,
        code=code,
        status=status if status is not None else cls.status,
        body=body,
        retry_after=retry_after,
    )
