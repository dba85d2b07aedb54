"""Friends reads: the player and its friends ranked among themselves.

Live (the generation merged with the speed layer) unless a snapshot is asked for
or a generation pinned (:meth:`api.reads.policy.FallbackPolicy.pinned`, without
the closed-board rule); not exact live: the latest generation, labelled snapshot.
"""

from __future__ import annotations

from typing import Literal

from api.errors import PlayerNotFound
from api.reads.answers import Answer, encode
from api.reads.labels import live_header, snapshot_header
from api.reads.policy import FallbackPolicy
from serving.segments import BoardSegment
from speed.flags import shadowed_among
from speed.friends import (
    FriendsReader,
    Standing,
    rank_members,
    read_friends,
    snapshot_standings,
)
from speed.live import LiveReader, NotExact


class FriendsReads:
    """Friends lists of one app (the caller checked the player's token)."""

    def __init__(
        self, policy: FallbackPolicy, live: LiveReader, friends: FriendsReader
    ) -> None:
        self.policy = policy
        self.live = live
        self.friends_reader = friends

    async def read(
        self,
        board: str,
        player_id: str,
        mode: Literal["live", "snapshot"],
        generation: str | None,
    ) -> Answer:
        """Shadowed friends are hidden; the player sees itself."""
        self.policy.check(board)
        friends = await read_friends(self.live, player_id)
        hidden = await shadowed_among(self.live.speed, friends)
        members = [player_id, *(f for f in friends if f not in hidden)]
        gen = self.policy.pinned(board, mode, generation, closed=False)
        if gen is None:
            try:
                scores, base, as_of = await self.friends_reader.live_scores(
                    board, members
                )
            except NotExact as why:
                gen = self.policy.fallback(str(why))
                scores = member_scores(gen.board(board), members)
                header = snapshot_header(board, mode, gen, len(scores))
            else:
                header = live_header(board, mode, base, as_of, len(scores))
        else:
            scores = member_scores(gen.board(board), members)
            header = snapshot_header(board, mode, gen, len(scores))
        if player_id not in scores:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}")
        return encode(
            {**header, "playerId": player_id, "entries": rank_members(scores)}
        )


def member_scores(
    segment: BoardSegment | None, members: list[str]
) -> dict[str, Standing]:
    """The members' standings in a generation (snapshot_standings), with the player
    itself (members[0]) on its own list even when shadowed in this generation."""
    standings = snapshot_standings(segment, members)
    if segment is not None and members and members[0] not in standings:
        hidden = segment.hidden.get(members[0])
        if hidden is not None:
            standings[members[0]] = (hidden, None)
    return standings
