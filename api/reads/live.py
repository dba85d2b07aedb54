"""Live reads: the base generation merged with the speed layer (:mod:`speed.live`).

Each read here is exact as of its ``asOf`` or raises: ``NotExact`` (a rebase in
progress), a Redis error, or ``PlayerNotFound``; what answers then is the fallback
policy's to say (:mod:`api.reads.policy`). Live top lists are cached per board
while the board's change stamp holds (:class:`api.reads.caches.LiveTopCache`).
"""

from __future__ import annotations

from typing import Any

from api.approx import Stamp
from api.errors import PlayerNotFound
from api.reads.answers import Answer, encode
from api.reads.caches import LiveTopCache
from api.reads.cursors import live_cursors
from api.reads.labels import Mode, live_header, public, top_percent
from api.reads.policy import Guard
from serving.ranking import Ranking, rank_of
from speed.live import LiveReader, PlayerMissing


class LiveReads:
    """Top, rank and nearby read live."""

    def __init__(self, live: LiveReader, tops: LiveTopCache) -> None:
        self.live = live
        self.tops = tops

    async def top(self, board: str, mode: Mode, limit: int, guard: Guard) -> Answer:
        """The live top list, from the cache while it is current; ``guard`` answers
        the fallback when it cannot be read exactly (a fallback is not cached)."""
        key = (board, limit)
        cached = self.tops.fresh(key)
        if cached is not None and cached.headers is None:
            return cached

        async def stamped() -> Answer:
            stamp, _ = await self.live.stamp()
            current = self.tops.current(key, stamp)
            if current is not None:
                return current
            return await self.tops.compute(
                key, stamp, lambda: self._computed(board, mode, limit, stamp, guard)
            )

        return await guard(stamped)

    async def _computed(
        self, board: str, mode: Mode, limit: int, stamp: Stamp, guard: Guard
    ) -> tuple[Answer, Stamp | None]:
        exact_for: Stamp | None = None

        async def read() -> Answer:
            nonlocal exact_for
            answer, exact_for = await self._top(board, mode, limit, stamp)
            return answer

        return await guard(read), exact_for

    async def _top(
        self, board: str, mode: Mode, limit: int, stamp: Stamp
    ) -> tuple[Answer, Stamp]:
        result = await self.live.top(board, limit)
        header = live_header(
            board, mode, result["base"], result["asOf"], result["population"]
        )
        answer = encode({**header, "entries": public(result["entries"])})
        base = result["base"].generation
        number = base.number if base is not None else 0
        # Exact for the bases and positions it read, and the flags and epoch as of
        # the stamp (read before it): any later change makes the stamps differ.
        exact_for = (
            *(number for _ in range(self.live.partitions)),
            *(int(result["asOf"][str(p)]) for p in range(self.live.partitions)),
            *stamp[-2:],
        )
        return answer, exact_for

    async def rank(
        self,
        board: str,
        player_id: str,
        mode: Mode,
        own: bool,
        ranking: Ranking | None = None,
    ) -> Answer:
        """The live rank under the board's own ranking, or under ``ranking`` (one
        that is not the board's own) when it can be read with it: the answer then
        names it (``Answer.ranking``). Competition and ordinal ranks come from the
        rank's own counts; a dense rank's distinct count is read in the rank's
        round trip (:meth:`LiveReader.rank_and_distinct`) and, when the board
        moved in between, the answer is under the board's own ranking (the
        caller reranks it, api/reads/ranking.py)."""
        try:
            if ranking == "dense":
                result = await self.live.rank_and_distinct(board, player_id)
            else:
                result = await self.live.rank(board, player_id)
        except PlayerMissing:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}") from None
        own_view_of_shadowed(result, board, player_id, own)
        header = live_header(
            board, mode, result["base"], result["asOf"], result["population"]
        )
        rank = percent_of = result["rank"]
        distinct = result.get("distinct")
        if ranking is None or (ranking == "dense" and distinct is None):
            ranking = None
        else:
            # As api/reads/ranking.py reranks an answer: from what is above it.
            rank = rank_of(ranking, result["position"], result["above"], distinct or 0)
            percent_of = result["above"] + 1
        return encode(
            {
                **header,
                "playerId": player_id,
                "score": result["score"],
                "rank": rank,
                "position": result["position"],
                "topPercent": top_percent(percent_of, result["population"]),
            },
            ranking,
        )

    async def nearby(
        self, board: str, player_id: str, radius: int, mode: Mode, own: bool
    ) -> Answer:
        try:
            result = await self.live.nearby(board, player_id, radius)
        except PlayerMissing:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}") from None
        own_view_of_shadowed(result, board, player_id, own)
        header = live_header(
            board, mode, result["base"], result["asOf"], result["population"]
        )
        return encode(
            {
                **header,
                "playerId": player_id,
                "entries": public(result["entries"]),
                "cursors": live_cursors(
                    result["base"], board, result["entries"], result["population"]
                ),
            }
        )


def own_view_of_shadowed(
    result: dict[str, Any], board: str, player_id: str, own: bool
) -> None:
    """A shadowed player is hidden from everyone but itself: others get 404; its
    own live read answers as if present, so it is counted back in the population
    (its own standing and window already hold it)."""
    if not result["shadowed"]:
        return
    if not own:
        raise PlayerNotFound(f"player {player_id!r} is not on {board}")
    result["population"] += 1
