"""Rankings other than a board's own: competition, dense or ordinal on any read.

Answers are built with the board's own ranking; another is computed from what is
above the answer's first score (:mod:`serving.ranking`), counted in the answer's
generation, or live as of its ``asOf`` (:meth:`speed.live.LiveReader.above`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from api.degraded import REDIS_DOWN
from api.errors import InvalidRequest, NotReady
from api.reads.answers import Answer, echo_ranking, resolve
from api.reads.labels import Mode, pin, top_percent
from api.reads.policy import FallbackPolicy
from serving.ranking import Ranking, rank_of, rerank
from speed.live import ATTEMPTS, LiveReader, NotExact


class Ranker:
    """Answers a read under the ranking it asks for."""

    def __init__(self, policy: FallbackPolicy, live: LiveReader) -> None:
        self.policy = policy
        self.live = live

    async def ranked(
        self,
        board: str,
        mode: Mode,
        ranking: Ranking | None,
        kind: str,
        generation: str | None,
        read: Callable[[str | None], Answer | Awaitable[Answer]],
        native: Ranking | None = None,
        read_as: Callable[[str | None, Ranking], Answer | Awaitable[Answer]]
        | None = None,
    ) -> Answer:
        """The answer of ``read`` (its generation parameter: ``generation``) under
        ``ranking`` (None: the board's own), echoed as ``ranking``. Answers are
        built with the board's own ranking; another is computed from what is above
        the answer's first score (serving/ranking.py), counted in the answer's
        generation, or live as of the answer's ``asOf`` (speed/live.py ``above``):
        when the board moved in between, the read is made again, and after
        ``ATTEMPTS`` the latest generation answers, labelled snapshot.
        ``read_as(generation, ranking)``: ``read`` asked for another ranking than
        the board's own, which it may answer under itself (a live player rank
        reads a dense rank's count in its own round trip): an answer naming it
        (``Answer.ranking``) is not reranked here."""
        self.policy.check(board)
        if native is None:
            native = self.policy.native_ranking(board)
        if mode == "approx":
            if ranking not in (None, "competition"):
                raise InvalidRequest(
                    "mode=approx answers ranking=competition only", field="ranking"
                )
            return echo_ranking(await resolve(read(generation)), "competition")
        want = ranking or native
        if want == native:
            return echo_ranking(await resolve(read(generation)), want)
        for _ in range(ATTEMPTS):
            answer = await resolve(
                read(generation) if read_as is None else read_as(generation, want)
            )
            if answer.ranking == want:
                return echo_ranking(answer, want)
            ranked = await self._rerank(board, answer, want, kind)
            if ranked is not None:
                return ranked
        latest = self.policy.fallback("the board kept changing")
        answer = await resolve(read(latest.id))
        ranked = await self._rerank(board, answer, want, kind)
        if ranked is None:  # pragma: no cover - a generation does not move
            raise NotReady("the board kept changing; retry shortly")
        return ranked

    async def _rerank(
        self, board: str, answer: Answer, want: Ranking, kind: str
    ) -> Answer | None:
        """``answer`` with its ranks under ``want``; None when the live board moved
        since the answer was read (or it is approximate: a rebase under way)."""
        body = orjson.loads(answer.body)
        if body.get("basis") == "histogram":
            return None
        entries = body.get("entries")
        score: int | None = None
        if kind == "player":
            score = body["score"]
        elif kind in ("nearby", "entries") and entries and entries[0]["position"] > 1:
            score = entries[0]["score"]
        above = distinct = 0
        if score is not None:
            counted = await self._above(board, body, score)
            if counted is None:
                return None
            above, distinct = counted
        if kind == "player":
            body["rank"] = rank_of(want, body["position"], above, distinct)
            body["topPercent"] = top_percent(above + 1, body["population"])
        if entries:
            rerank(entries, want, above, distinct)
        body["ranking"] = want
        return Answer(orjson.dumps(body), answer.headers, answer.players)

    async def _above(
        self, board: str, body: dict[str, Any], score: int
    ) -> tuple[int, int] | None:
        """(players, distinct scores) above ``score`` where ``body`` was read: its
        generation, or live as of its ``asOf`` (None when the board moved since)."""
        generation = body.get("generation") or {}
        if body.get("basis") == "snapshot":
            segment = pin(self.policy.registry, generation.get("id")).board(board)
            if segment is None:
                return 0, 0
            return segment.count_above(score), segment.distinct_above(score)
        try:
            live = await self.live.above(board, score)
        except (NotExact, *REDIS_DOWN):
            return None
        if live["asOf"] != body["asOf"] or live["generation"] != generation.get("id"):
            return None
        return live["above"], live["distinct"]
