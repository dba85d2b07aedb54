"""Who may read (API.md "Readers"): the one gate in front of every read.

With ``LB_READ_AUTH=token`` every read under ``/v1/boards`` and ``/v1/games`` (GET
or HEAD; the writes there are signed) needs ``Authorization: Bearer <JWT>`` signed
with ``LB_PLAYER_TOKEN_KEY``: a player token or a reader token (``sub`` =
``reader:<name>``); none, an invalid or an expired one answers 401 ``unauthorized``,
as the friends read does. ``LB_READ_RATE_LIMIT`` then spends a token of the
subject's bucket (:mod:`speed.readers`) per read: 429 ``rate_limited`` with
``Retry-After`` when it is empty. ``/healthz``, ``/readyz``, ``/metrics``, the page and
its assets are outside these paths and stay open.

:func:`refusal` is asked by the API's one middleware (api/middleware.py) in front of
the router, so it holds for every read path alike -- the direct routes
(api/direct.py), FastAPI's own, and paths no route matches (no answer tells an
unauthenticated client which boards exist). It only refuses: what it lets through is
dispatched as before. The bearer it verified is left in the request's state
(:func:`bearer_of`), so a route does not verify it again. With open reads it is not
asked at all.
"""

from __future__ import annotations

import logging

from starlette.responses import Response
from starlette.types import Scope

from api.degraded import REDIS_DOWN
from api.errors import ApiError, TooManyRequests, Unauthorized, error_body
from api.metrics import READS_REFUSED, REDIS_ERRORS
from api.responses import FastJSONResponse
from api.tokens import Bearer
from speed.readers import ReadLimiter

READ_PREFIXES = ("/v1/boards", "/v1/games")
READ_METHODS = frozenset({"GET", "HEAD"})
STATE_KEY = "lb_bearer"
log = logging.getLogger("leaderboard.api")


def is_read(method: str, path: str) -> bool:
    """A read the gate guards: GET or HEAD of a path under a read prefix."""
    if method not in READ_METHODS:
        return False
    for prefix in READ_PREFIXES:
        if path.startswith(prefix) and (
            len(path) == len(prefix) or path[len(prefix)] == "/"
        ):
            return True
    return False


def bearer_of(scope: Scope) -> Bearer | None:
    """The bearer the gate verified for this request (None: open reads)."""
    state = scope.get("state")
    return state.get(STATE_KEY) if state else None


async def refusal(scope: Scope) -> Response | None:
    """The answer refusing this read (401 or 429), or None when it may go ahead:
    then the verified bearer is in the request's state (:func:`bearer_of`).

    For a read (:func:`is_read`) when ``LB_READ_AUTH=token``; reads the app's
    ``state.token_verifier`` and ``state.read_limiter`` (None: no limit), set up in
    api/main.py.
    """
    state = scope["app"].state
    try:
        bearer = state.token_verifier.verify(_authorization(scope))
        limiter = getattr(state, "read_limiter", None)
        if limiter is not None:
            await _spend(limiter, bearer)
    except ApiError as exc:
        READS_REFUSED.labels(exc.code).inc()
        headers = dict(exc.headers)
        if isinstance(exc, Unauthorized):
            headers["WWW-Authenticate"] = "Bearer"
        body = error_body(exc.code, exc.detail)
        return FastJSONResponse(body, status_code=exc.status, headers=headers)
    scope.setdefault("state", {})[STATE_KEY] = bearer
    return None


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return None


async def _spend(limiter: ReadLimiter, bearer: Bearer) -> None:
    """One token of the subject's bucket; TooManyRequests when it has none. With
    Redis unreachable the read goes ahead (reads outlive Redis, api/degraded.py)."""
    try:
        wait = await limiter.take(bearer.subject)
    except REDIS_DOWN:
        REDIS_ERRORS.labels("read").inc()
        return
    if wait > 0:
        raise TooManyRequests(
            f"read rate limit of {bearer.subject!r} reached; retry after {wait} s",
            wait,
        )
