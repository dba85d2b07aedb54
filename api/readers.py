"""Who may read (API.md "Readers"): the one gate in front of every read.

With ``LB_READ_AUTH=token`` every read under ``/v1/boards`` and ``/v1/games`` (GET
or HEAD; the writes there are signed) needs ``Authorization: Bearer <JWT>`` signed
with ``LB_PLAYER_TOKEN_KEY``: a player token or a reader token (``sub`` =
``reader:<name>``); none, an invalid or an expired one answers 401 ``unauthorized``,
as the friends read does. ``LB_READ_RATE_LIMIT`` then spends a token of the
subject's bucket (:mod:`speed.readers`) per read: 429 ``rate_limited`` with
``Retry-After`` when it is empty. The take rides along with the read's own Redis
round trip (:class:`PendingTake`), and a subject refused before is refused again
without one until its bucket refills (:meth:`speed.readers.ReadLimiter.refused`).
``/healthz``, ``/readyz``, ``/metrics``, the page and its assets are outside these
paths and stay open.

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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.degraded import REDIS_DOWN
from api.errors import ApiError, TooManyRequests, Unauthorized, error_body
from api.metrics import READS_REFUSED, REDIS_ERRORS
from api.responses import FastJSONResponse
from api.tokens import Bearer
from speed.connection import GATE_RIDER
from speed.readers import ReadLimiter

READ_PREFIXES = ("/v1/boards", "/v1/games")
READ_METHODS = frozenset({"GET", "HEAD"})
STATE_KEY = "lb_bearer"
TAKE_KEY = "lb_read_take"
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
    """The answer refusing this read (401, or 429 for a subject whose bucket is
    known to be empty), or None when it may go ahead: then the verified bearer is
    in the request's state (:func:`bearer_of`), and with a rate limit the take of
    its bucket's token is pending there (:func:`pending_take`).

    For a read (:func:`is_read`) when ``LB_READ_AUTH=token``; reads the app's
    ``state.token_verifier`` and ``state.read_limiter`` (None: no limit), set up in
    api/main.py.
    """
    state = scope["app"].state
    take: PendingTake | None = None
    try:
        bearer = state.token_verifier.verify(_authorization(scope))
        limiter = getattr(state, "read_limiter", None)
        if limiter is not None:
            wait = limiter.refused(bearer.subject)
            if wait > 0:
                raise _too_many(bearer.subject, wait)
            take = PendingTake(limiter, bearer.subject)
    except ApiError as exc:
        return refused_answer(exc)
    request_state = scope.setdefault("state", {})
    request_state[STATE_KEY] = bearer
    if take is not None:
        request_state[TAKE_KEY] = take
    return None


def pending_take(scope: Scope) -> PendingTake | None:
    """The rate limit's take :func:`refusal` left pending for this read."""
    state = scope.get("state")
    return state.get(TAKE_KEY) if state else None


def refused_answer(exc: ApiError) -> Response:
    READS_REFUSED.labels(exc.code).inc()
    headers = dict(exc.headers)
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    body = error_body(exc.code, exc.detail)
    return FastJSONResponse(body, status_code=exc.status, headers=headers)


def _too_many(subject: str, wait: int) -> TooManyRequests:
    return TooManyRequests(
        f"read rate limit of {subject!r} reached; retry after {wait} s", wait
    )


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return None


class PendingTake:
    """One token of the subject's bucket, spent by the read's own Redis round trip.

    :meth:`run` dispatches the read with the take riding along with its first round
    trip (:data:`speed.connection.GATE_RIDER`); before the answer starts, the take's
    outcome decides: a token spent, the answer goes out; none, a 429 with
    ``Retry-After`` goes out instead (the read's answer is dropped unsent). A read
    that made no round trip (a cached snapshot answer) spends its token with one of
    its own then. Exactly one take per read, as one in front of the read would be:
    what the client sees is the same, one round trip less. With Redis unreachable
    the read goes ahead (reads outlive Redis, api/degraded.py).
    """

    __slots__ = ("limiter", "subject", "rider")

    def __init__(self, limiter: ReadLimiter, subject: str) -> None:
        self.limiter = limiter
        self.subject = subject
        self.rider = limiter.rider(subject)

    async def wait(self) -> int:
        """0 when the read may be answered, else its Retry-After."""
        try:
            return await self.limiter.settle(self.subject, self.rider)
        except REDIS_DOWN:
            REDIS_ERRORS.labels("read").inc()
            return 0

    async def run(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send
    ) -> None:
        settled = False
        refused = False

        async def gated_send(message: Message) -> None:
            nonlocal settled, refused
            if refused:
                return  # the read's answer, after a 429 went out instead
            if message["type"] == "http.response.start" and not settled:
                settled = True
                wait = await self.wait()
                if wait > 0:
                    refused = True
                    answer = refused_answer(_too_many(self.subject, wait))
                    await answer(scope, receive, send)
                    return
            await send(message)

        reset = GATE_RIDER.set(self.rider)
        try:
            await app(scope, receive, gated_send)
        finally:
            GATE_RIDER.reset(reset)
            if not settled:
                # No answer started (the read failed): its token is spent still.
                settled = True
                await self.wait()
