"""The API's read service without HTTP, for the callers above both ``api`` and
``jobs``: ``lb verify`` and the ``verify_generation`` and ``season_close`` DAGs.

The batch layer checks what the API serves against its own offline computation,
but it may not import the API (``jobs`` sits beside ``api``, not below it; the
layering test holds that). So the check takes the served answers as an object
(``jobs.verify.ServedReads``) and the caller on top hands this one in.

The app is built by :func:`api.main.create_app` and started by its own lifespan,
so the read service is wired exactly as in a worker (same registry, speed layer,
caches); its methods are awaited directly on a private event loop: no request,
no router, no test client. Answers are the JSON bodies a client would get;
``None`` stands for a 404, any other failure is its error body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from fastapi import FastAPI
from redis.exceptions import RedisError

from api.errors import ApiError, error_body, store_error_reason
from api.main import create_app
from api.reads import Answer, ReadService
from conf.settings import Settings
from serving.orientation import real_body
from serving.registry import Generation


class ServedReads:
    """Reads of a started app's read service; see the module docstring."""

    def __init__(self, app: FastAPI, runner: asyncio.Runner) -> None:
        self._app = app
        self._runner = runner

    @property
    def _reads(self) -> ReadService:
        reads: ReadService = self._app.state.reads
        return reads

    def latest_generation(self) -> Generation | None:
        """The newest published generation, looked up again now."""
        registry = self._app.state.generations
        registry.refresh(force=True)
        latest: Generation | None = registry.latest()
        return latest

    def top(
        self, board: str, limit: int, generation: str | None = None
    ) -> dict[str, Any] | None:
        """``GET /v1/boards/{board}/top?limit=&generation=`` (live when None)."""
        return self._answer(lambda: self._reads.top(board, limit, "live", generation))

    def player(
        self, board: str, player: str, generation: str | None = None
    ) -> dict[str, Any] | None:
        """``GET /v1/boards/{board}/players/{player}`` (no viewer)."""
        return self._answer(
            lambda: self._reads.rank(board, player, "live", generation, None)
        )

    def awards(
        self, board: str, cursor: str | None = None, limit: int = 1000
    ) -> dict[str, Any] | None:
        """``GET /v1/boards/{board}/awards?cursor=&limit=`` (latest version)."""
        return self._answer(lambda: self._reads.awards(board, None, cursor, limit))

    def _answer(
        self, read: Callable[[], Answer | Awaitable[Answer]]
    ) -> dict[str, Any] | None:
        try:
            answer = read()
            if not isinstance(answer, Answer):
                answer = self._runner.run(_awaited(answer))
        except ApiError as exc:
            if exc.status == 404:
                return None
            return error_body(exc.code, exc.detail, **exc.extra)
        except (RedisError, OSError) as exc:
            return error_body("unavailable", store_error_reason(exc))
        # Score out, as ReadService.profiled does for HTTP answers.
        raw = real_body(self._reads.config, answer.body) or answer.body
        body: dict[str, Any] = orjson.loads(raw)
        return body


async def _awaited(answer: Awaitable[Answer]) -> Answer:
    return await answer


@contextmanager
def served_reads(settings: Settings) -> Iterator[ServedReads]:
    """A started app's read service for the duration of the block."""
    app = create_app(settings)
    with asyncio.Runner() as runner:
        lifespan = app.router.lifespan_context(app)
        runner.run(lifespan.__aenter__())
        try:
            yield ServedReads(app, runner)
        finally:
            runner.run(lifespan.__aexit__(None, None, None))
