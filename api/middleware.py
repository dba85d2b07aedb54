"""The API's one middleware: plain ASGI between FastAPI's error middlewares and its
router, so every request still goes through the router and its dependencies.

Per HTTP request, in this order (each was a middleware of its own):

1. the request count and latency per route template and game, and a ranked read's
   latency by mode (:class:`api.metrics.RequestSeries`), whatever the answer, a
   refusal of step 3 or an exception included (500);
2. a scoring-rule promotion applied if the rule state changed
   (:func:`api.rule_reload.reload_rules`);
3. with ``LB_READ_AUTH=token`` only, the gate of the reads
   (:func:`api.readers.refusal`): 401 (or 429 for a subject known to be out of
   tokens) answered here, in front of the router; with LB_READ_RATE_LIMIT the
   bucket's take rides along with the read (:class:`api.readers.PendingTake`),
   which answers 429 instead of the read when it found no token. With open reads
   nothing of it runs.

Three middlewares cost a call frame, a ``send`` wrapper or a state lookup each per
request, and Starlette's ``BaseHTTPMiddleware`` (a task and streams per request)
about a third of the API's CPU: none is used.
"""

from __future__ import annotations

from time import perf_counter

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.games import game_of
from api.metrics import RequestSeries
from api.readers import is_read, pending_take, refusal
from api.rule_reload import reload_rules


class ApiMiddleware:
    """See the module docstring; ``gate_reads`` is ``LB_READ_AUTH=token``."""

    def __init__(self, app: ASGIApp, gate_reads: bool) -> None:
        self.app = app
        self.gate_reads = gate_reads
        self.series = RequestSeries()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = perf_counter()
        status = 500

        async def observe_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            reload_rules(scope["app"].state)
            if self.gate_reads and is_read(scope["method"], scope["path"]):
                refused = await refusal(scope)
                if refused is not None:
                    await refused(scope, receive, observe_send)
                    return
                take = pending_take(scope)
                if take is not None:
                    await take.run(self.app, scope, receive, observe_send)
                    return
            await self.app(scope, receive, observe_send)
        finally:
            self.series.observe(
                getattr(scope.get("route"), "path", "unmatched"),
                status,
                scope.get("query_string", b""),
                perf_counter() - started,
                # GamePaths (inside) names the game in the scope it routed.
                game_of(scope),
            )
