"""The read service: the facade the routes call (see :mod:`api.reads`).

Each read states once how it is answered in each mode (:class:`Fallbacks`) and
the fallback policy picks one (:mod:`api.reads.policy`); the modes live in their
own modules: :mod:`~api.reads.snapshot`, :mod:`~api.reads.live`,
:mod:`~api.reads.approx`, :mod:`~api.reads.friends`, :mod:`~api.reads.awards`;
rankings other than the board's own in :mod:`~api.reads.ranking`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Literal

from api.degraded import LIVE_LAYER_HEADER, REDIS_DOWN
from api.errors import PlayerNotFound
from api.reads.answers import Answer, encode, with_profiles
from api.reads.approx import ApproxReads
from api.reads.awards import AwardPages
from api.reads.caches import LiveTopCache, SnapshotCache
from api.reads.friends import FriendsReads
from api.reads.labels import Mode, is_own_read
from api.reads.live import LiveReads
from api.reads.policy import FallbackPolicy, Fallbacks, unavailable_player
from api.reads.ranking import Ranker
from api.reads.snapshot import (
    SnapshotReads,
    located,
    nearby_body,
    rank_body,
    top_body,
)
from conf.boards import BoardsConfig
from serving.orientation import real_body
from serving.ranking import Ranking
from serving.registry import Generation, GenerationRegistry
from serving.segments import BoardSegment
from speed.friends import FriendsReader
from speed.live import LiveReader, PlayerMissing
from speed.profiles import ProfileCache, version_rider


class ReadService:
    """Answers the ranked reads of one app (see the module docstring)."""

    def __init__(
        self,
        config: BoardsConfig,
        registry: GenerationRegistry,
        live: LiveReader,
        friends: FriendsReader,
        data_dir: Path,
        live_cache_ms: int = 0,
    ) -> None:
        self.policy = FallbackPolicy(config, registry)
        self.registry = registry
        self.live = live
        self.friends_reader = friends
        self.data_dir = data_dir
        self.tops = LiveTopCache(live_cache_ms)
        self.profile_cache = ProfileCache()
        self.snapshots = SnapshotReads(registry)
        self.live_reads = LiveReads(live, self.tops)
        self.approx = ApproxReads(live, registry)
        self.ranker = Ranker(self.policy, live)
        self.friend_reads = FriendsReads(self.policy, live, friends)
        self.award_pages = AwardPages(self.policy, data_dir)

    @property
    def config(self) -> BoardsConfig:
        return self.policy.config

    @property
    def speed(self) -> Any:
        return self.live.speed

    async def profiled(
        self, read: Answer | Awaitable[Answer], players: tuple[str, ...] = ()
    ) -> Answer:
        """The answer of ``read`` with its players' profiles. Only players the
        answer already names are looked up, so a hidden (shadowed) player's profile
        stays as hidden as the player. The profiles' version rides along with the
        read's own round trip; players seen at that version cost nothing more, the
        others one HMGET (speed/profiles.py); ``players`` known before the read
        (the player of a player read) ride along too. Redis unreachable: no
        profiles."""
        mark = self.profile_cache.mark()
        with version_rider(players) as rider:
            answer = read if isinstance(read, Answer) else await read
        # Score out: answers are built from oriented scores (serving/orientation.py).
        if self.policy.has_asc_boards:
            real = real_body(self.config, answer.body)
            if real is not None:
                answer = Answer(real, answer.headers, answer.players)
        version = self.profile_cache.take(rider, players, mark)
        if not answer.players or (
            answer.headers is not None and LIVE_LAYER_HEADER in answer.headers
        ):
            return answer  # nothing to look up, or Redis is unreachable
        try:
            profiles = await self.profile_cache.profiles(
                self.speed.client, list(answer.players), version
            )
        except REDIS_DOWN:
            return answer
        return with_profiles(answer, profiles)

    def use_boards(self, config: BoardsConfig) -> None:
        """Answer from now on under ``config`` (a season promoted to another rule)."""
        self.policy.use_boards(config)

    @staticmethod
    def answers(generation: Generation) -> SnapshotCache:
        """The generation's cache of encoded answers (it lives with the mapping)."""
        return SnapshotReads.answers(generation)

    # ------------------------------------------------------------------ the reads

    async def top(
        self,
        board: str,
        limit: int,
        mode: Mode,
        generation: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        return await self.ranker.ranked(
            board,
            mode,
            ranking,
            "top",
            generation,
            lambda g: self._top(board, limit, mode, g),
        )

    def _top(
        self, board: str, limit: int, mode: Mode, generation: str | None
    ) -> Answer | Awaitable[Answer]:
        self.policy.check(board)

        def snapshot(gen: Generation) -> Answer:
            return self.snapshots.top(board, mode, gen, limit)

        def unavailable(
            gen: Generation, segment: BoardSegment | None
        ) -> dict[str, Any]:
            return top_body(board, mode, gen, segment, limit)

        fallbacks = Fallbacks(board, "top", snapshot, unavailable)
        # The histogram orders buckets, not players: a top list is always read
        # live; the cache's computation is guarded too (its fallback not cached).
        return self.policy.read(
            mode,
            generation,
            fallbacks,
            lambda: self.live_reads.top(
                board,
                mode,
                limit,
                lambda read: self.policy.guard(fallbacks, read),
            ),
        )

    async def rank(
        self,
        board: str,
        player_id: str,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        return await self.ranker.ranked(
            board,
            mode,
            ranking,
            "player",
            generation,
            lambda g: self._rank(board, player_id, mode, g, viewer),
            read_as=lambda g, want: self._rank(board, player_id, mode, g, viewer, want),
        )

    def _rank(
        self,
        board: str,
        player_id: str,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
        ranking: Ranking | None = None,
    ) -> Answer | Awaitable[Answer]:
        """The player's rank read (``ranking``: one asked for, not the board's
        own; a live read may answer under it, :meth:`LiveReads.rank`)."""
        self.policy.check(board)
        own = is_own_read(viewer, player_id)

        def snapshot(gen: Generation) -> Answer:
            return self.snapshots.rank(board, player_id, mode, gen, own)

        def unavailable(
            gen: Generation, segment: BoardSegment | None
        ) -> dict[str, Any]:
            segment, me = located(
                segment, player_id, own, lambda: unavailable_player(player_id, gen)
            )
            return rank_body(board, mode, gen, segment, player_id, me)

        async def approx() -> Answer:
            try:
                return encode(await self.approx.rank(board, player_id, mode, own))
            except PlayerMissing:
                raise PlayerNotFound(
                    f"player {player_id!r} is not on {board}"
                ) from None

        async def live() -> Answer:
            if mode == "approx":
                return await approx()
            return await self.live_reads.rank(board, player_id, mode, own, ranking)

        # Not exact live: the approximate rank (it needs no settled base).
        fallbacks = Fallbacks(board, "rank", snapshot, unavailable, approx)
        return self.policy.read(mode, generation, fallbacks, live)

    async def approx_rank(
        self, board: str, player_id: str, mode: Mode, own: bool
    ) -> dict[str, Any]:
        """The approximate rank's body (:meth:`api.reads.approx.ApproxReads.rank`)."""
        return await self.approx.rank(board, player_id, mode, own)

    async def nearby(
        self,
        board: str,
        player_id: str,
        radius: int,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        return await self.ranker.ranked(
            board,
            mode,
            ranking,
            "nearby",
            generation,
            lambda g: self._nearby(board, player_id, radius, mode, g, viewer),
        )

    def _nearby(
        self,
        board: str,
        player_id: str,
        radius: int,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
    ) -> Answer | Awaitable[Answer]:
        self.policy.check(board)
        own = is_own_read(viewer, player_id)

        def snapshot(gen: Generation) -> Answer:
            return self.snapshots.nearby(board, player_id, radius, mode, gen, own)

        def unavailable(
            gen: Generation, segment: BoardSegment | None
        ) -> dict[str, Any]:
            segment, me = located(
                segment, player_id, own, lambda: unavailable_player(player_id, gen)
            )
            return nearby_body(board, mode, gen, segment, player_id, me, radius)

        fallbacks = Fallbacks(board, "nearby", snapshot, unavailable)
        return self.policy.read(
            mode,
            generation,
            fallbacks,
            lambda: self.live_reads.nearby(board, player_id, radius, mode, own),
        )

    async def entries(
        self,
        board: str,
        cursor: str | None,
        limit: int,
        generation: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        """One page of a generation in display order; a cursor pins its generation."""

        def read(g: str | None) -> Answer:
            self.policy.check(board)
            return self.snapshots.entries(board, cursor, limit, g)

        return await self.ranker.ranked(
            board, "snapshot", ranking, "entries", generation, read
        )

    async def friends(
        self,
        board: str,
        player_id: str,
        mode: Literal["live", "snapshot"],
        generation: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        """The player and friends ranked among themselves (the caller checked the
        player's token). Shadowed friends are hidden; the player sees itself."""
        return await self.ranker.ranked(
            board,
            mode,
            ranking,
            "friends",
            generation,
            lambda g: self.friend_reads.read(board, player_id, mode, g),
            native="competition",
        )

    def awards(
        self, board: str, version: int | None, cursor: str | None, limit: int
    ) -> Answer:
        """A page of a closed season's award snapshot (:mod:`api.reads.awards`)."""
        return self.award_pages.page(board, version, cursor, limit)
