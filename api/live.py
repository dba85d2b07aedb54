"""Live reads: the base generation merged with the speed layer's changed players.

Exact live rank of score s (DESIGN.md):
    1 + (snapshot scores above s) - (changed players whose snapshot score is above s)
      + (changed players whose live score is above s)
summed over partitions. Each partition's part is read atomically by one Lua script,
and because an event touches only its own partition, the per-partition reads compose
into the exact state as of the position vector returned as ``asOf``.

The snapshot is the partition's *base* generation (the one its changed-sets are
relative to); while a rebase is half done the partitions disagree, exactness is not
possible, and the answer comes from the histogram, labelled so.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoScriptError

from conf.boards import board_order
from serving.registry import Generation, GenerationRegistry
from serving.segments import BoardSegment
from speed.connection import send_commands
from speed.lua import load
from speed.partitions import (
    Keys,
    decode_achieved,
    decode_entry,
    encode_entry,
    encode_score,
    partition_of,
)
from speed.store import SpeedLayer

ATTEMPTS = 5
# Standings remembered per (board, player) for guessing the next read's score.
REMEMBERED = 100_000


class NotExact(Exception):
    """Exactness is impossible right now (a rebase in progress, base not mapped)."""


class PlayerMissing(Exception):
    pass


@dataclass
class Base:
    """The snapshot side of a live read: generation G (None = nothing published)."""

    generation: Generation | None
    segment: BoardSegment | None

    @property
    def population(self) -> int:
        return self.segment.population if self.segment else 0

    def count_above(self, score: int) -> int:
        return self.segment.count_above(score) if self.segment else 0

    def rows_before(
        self, score: int, player_id: str, achieved: int | None = None
    ) -> int:
        return (
            self.segment.first_row_at_or_after(score, player_id, achieved)
            if self.segment
            else 0
        )

    def encoded(self, row: int) -> bytes:
        assert self.segment is not None
        achieved = self.segment.achieved
        return encode_entry(
            int(self.segment.scores[row]),
            self.segment.players.str_at(row),
            None if achieved is None else int(achieved[row]),
        )

    def encoded_prefix(self, rows: int) -> list[bytes]:
        """The first ``rows`` rows encoded; cached on the immutable segment, since
        every live top list starts from the same rows."""
        if self.segment is None or rows <= 0:
            return []
        cache = self.segment.encoded_prefix
        if len(cache) < rows:
            cache.extend(self.encoded(row) for row in range(len(cache), rows))
        return cache[:rows]


async def run_commands(
    client: Any, script: Any, commands: list[tuple[Any, ...]]
) -> list[Any]:
    """:func:`send_commands` for read-only commands and EVALSHAs of ``script``: if
    Redis lost the script it is loaded and everything sent again (nothing was
    changed); any other error reply is raised."""
    replies = await send_commands(client, commands)
    if script is not None and any(isinstance(r, NoScriptError) for r in replies):
        await client.script_load(script.script)
        replies = await send_commands(client, commands)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _changed_keys(keys: Keys, board: str) -> list[str]:
    """The keys every live read script starts with: base hash, log position and the
    board's two changed-sets."""
    return [
        keys.base_generation,
        keys.position,
        keys.changed_live(board),
        keys.changed_snapshot(board),
    ]


def _as_of(replies: list[list[Any]]) -> dict[str, int]:
    """Log positions per partition, the second value of every live script reply."""
    return {str(p): _int(r[1]) for p, r in enumerate(replies)}


def _int(value: Any) -> int:
    return int(value.decode() if isinstance(value, bytes) else value)


def _total(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    return int(raw.split(b"|", 1)[0])


def _standing(raw: bytes | None) -> tuple[int, int | None] | None:
    """(total, achievedMs or None) of a totals value "total|version[|achievedMs]"."""
    if raw is None:
        return None
    parts = raw.split(b"|")
    return int(parts[0]), int(parts[2]) if len(parts) > 2 else None


class LiveReader:
    """Exact live and approximate reads over Redis plus the mapped generations."""

    def __init__(self, speed: SpeedLayer, registry: GenerationRegistry) -> None:
        self.speed = speed
        self.registry = registry
        client = speed.client
        self._counts = client.register_script(load("live_counts"))
        self._window_script = client.register_script(load("live_window"))
        self._approx = client.register_script(load("approx_rank"))
        self._stamp_script = client.register_script(load("live_stamp"))
        self._last_bases: list[int] | None = None
        self._standings: OrderedDict[tuple[str, str], tuple[int, int | None]] = (
            OrderedDict()
        )

    @property
    def partitions(self) -> int:
        return self.speed.partitions

    def _order(self, board: str) -> tuple[bool, bool]:
        """(first_achieved, unique rank) of the board."""
        return board_order(self.speed.boards, board)

    async def _standing(
        self, board: str, player_id: str
    ) -> tuple[tuple[int, int | None] | None, bool]:
        """(the player's live standing, whether it is shadowed): one round trip."""
        keys = Keys(partition_of(player_id, self.partitions))
        raw, flag = await run_commands(
            self.speed.client,
            None,
            [("HGET", keys.totals(board), player_id), ("HGET", keys.flags, player_id)],
        )
        standing = _standing(raw.encode() if isinstance(raw, str) else raw)
        return standing, flag in (b"shadow", "shadow")

    def _base(self, bases: list[int], board: str) -> Base:
        """The common base generation of all partitions, mapped; else NotExact."""
        if len(set(bases)) != 1:
            raise NotExact("a rebase is in progress")
        number = bases[0]
        if number == 0:
            return Base(None, None)
        generation = self.registry.by_number(number)
        if generation is None:
            self.registry.refresh(force=True)
            generation = self.registry.by_number(number)
        if generation is None:
            raise NotExact(f"base generation g{number} is not mapped")
        return Base(generation, generation.board(board))

    async def live_total(self, board: str, player_id: str) -> int | None:
        keys = Keys(partition_of(player_id, self.partitions))
        raw = await self.speed.client.hget(keys.totals(board), player_id)
        return _total(raw.encode() if isinstance(raw, str) else raw)

    def guess(self, board: str, player_id: str) -> tuple[int, int | None] | None:
        """The player's standing as last read, else in the latest generation, else
        None: a guess, always checked against Redis in the same round trip."""
        known = self._standings.get((board, player_id))
        if known is not None:
            return known
        latest = self.registry.latest()
        segment = latest.board(board) if latest is not None else None
        if segment is None:
            return None
        row = segment.row_of(player_id)
        if row is None:
            return None
        achieved = segment.achieved
        return int(segment.scores[row]), None if achieved is None else int(
            achieved[row]
        )

    def remember(
        self, board: str, player_id: str, standing: tuple[int, int | None]
    ) -> None:
        key = (board, player_id)
        self._standings[key] = standing
        self._standings.move_to_end(key)
        if len(self._standings) > REMEMBERED:
            self._standings.popitem(last=False)

    async def _counts_round(
        self,
        board: str,
        above: bytes,
        before: bytes,
        player_id: str | None,
        read_flag: bool = False,
    ) -> tuple[list[list[Any]], bool | None]:
        """``live_counts.lua`` on every partition in one round trip; the partition
        owning ``player_id`` also returns that player's current total. With
        ``read_flag`` the player's shadow flag is read in the same round trip
        (else None comes back)."""
        owner = partition_of(player_id, self.partitions) if player_id else -1
        sha = self._counts.sha
        commands: list[tuple[Any, ...]] = []
        if read_flag and player_id:
            commands.append(("HGET", Keys(owner).flags, player_id))
        for p in range(self.partitions):
            keys = Keys(p)
            script_keys = [*_changed_keys(keys, board), keys.totals(board)]
            commands.append(
                (
                    "EVALSHA",
                    sha,
                    len(script_keys),
                    *script_keys,
                    above,
                    before,
                    player_id if player_id and p == owner else "",
                )
            )
        replies = await run_commands(self.speed.client, self._counts, commands)
        if read_flag and player_id:
            return replies[1:], replies[0] in (b"shadow", "shadow")
        return replies, None

    async def rank(self, board: str, player_id: str) -> dict[str, Any]:
        """Exact live score, rank, position and population of one player.

        One round trip when the player's standing is guessed right (as last read,
        or in the latest generation): the owner partition verifies it in the same
        atomic read as its counts; a wrong guess costs one more round trip."""
        owner = partition_of(player_id, self.partitions)
        _, unique = self._order(board)
        standing = self.guess(board, player_id)
        shadowed: bool | None = None
        if standing is None:
            standing, shadowed = await self._standing(board, player_id)
        for _ in range(ATTEMPTS):
            if standing is None:
                raise PlayerMissing(player_id)
            score, achieved = standing
            replies, flag = await self._counts_round(
                board,
                encode_score(score),
                encode_entry(score, player_id, achieved),
                player_id,
                read_flag=shadowed is None,
            )
            if flag is not None:
                shadowed = flag
            verified = replies[owner][8]
            current = _standing(verified) if verified else None
            if current != standing:
                # The player moved since the guess (or between the two reads): read
                # again at the new score.
                standing = current
                continue
            self.remember(board, player_id, standing)
            base = self._base([_int(r[0]) for r in replies], board)
            above = base.count_above(score) + sum(
                _int(r[2]) - _int(r[3]) for r in replies
            )
            before = base.rows_before(score, player_id, achieved) + sum(
                _int(r[4]) - _int(r[5]) for r in replies
            )
            population = base.population + sum(_int(r[6]) - _int(r[7]) for r in replies)
            return {
                "score": score,
                "achieved": achieved,
                "rank": before + 1 if unique else above + 1,
                "position": before + 1,
                "population": population,
                "asOf": _as_of(replies),
                "base": base,
                # Shadowed players are out of every count: their own read adds
                # them back (api/reads.py).
                "shadowed": bool(shadowed),
            }
        raise NotExact("the player's score kept changing")

    async def _window(
        self,
        board: str,
        forward_from: bytes | str,
        forward_limit: int,
        backward_from: bytes | str,
        backward_limit: int,
        snap_min: bytes | str,
        snap_max: bytes | str,
    ) -> list[list[Any]]:
        args = [
            forward_from,
            forward_limit,
            backward_from,
            backward_limit,
            snap_min,
            snap_max,
        ]
        calls = []
        for p in range(self.partitions):
            keys = Keys(p)
            calls.append(
                (
                    _changed_keys(keys, board),
                    args,
                )
            )
        return await self.speed.run_script(self._window_script, calls)

    async def top(self, board: str, limit: int) -> dict[str, Any]:
        """The exact live first ``limit`` display positions."""
        rows = limit + 16
        for _ in range(ATTEMPTS * 4):
            probe = await self._window_call(board, rows, limit)
            if probe is not None:
                return probe
            rows *= 2
        raise NotExact("could not settle the top entries")

    async def _window_call(
        self, board: str, rows: int, limit: int
    ) -> dict[str, Any] | None:
        # Which base? Read it with the window; rows of the snapshot depend on it, so
        # the first pass learns the base and a second pass (rarely) corrects the range.
        # The snapshot rows to read depend on the base generation: use the bases seen
        # last time, and read again in the rare case the window reports others.
        base_numbers = self._last_bases or [0] * self.partitions
        for _ in range(ATTEMPTS):
            try:
                base = self._base(base_numbers, board)
            except NotExact:
                base_numbers = await self._bases()
                continue
            take = min(rows, base.population)
            encoded = base.encoded_prefix(take)
            snap_max: bytes | str = b"[" + encoded[-1] if take > 0 else ""
            replies = await self._window(
                board, "-", limit, "+", 0, "-" if take > 0 else "", snap_max
            )
            seen = [_int(r[0]) for r in replies]
            if seen != base_numbers:
                base_numbers = seen
                continue
            self._last_bases = seen
            changed = {m for r in replies for m in r[6]}
            unchanged = [m for m in encoded if m not in changed]
            if len(unchanged) < limit and take < base.population:
                return None
            live = [m for r in replies for m in r[4]]
            merged = sorted(unchanged + live)[:limit]
            timed, unique = self._order(board)
            entries = _ranked(
                merged, first_position=1, first_rank=None, timed=timed, unique=unique
            )
            population = base.population + sum(_int(r[2]) - _int(r[3]) for r in replies)
            return {
                "entries": entries,
                "population": population,
                "asOf": _as_of(replies),
                "base": base,
            }
        raise NotExact("a rebase is in progress")

    async def _bases(self) -> list[int]:
        pipe = self.speed.client.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.hget(Keys(p).base_generation, "g")
        return [_int(v) if v is not None else 0 for v in await pipe.execute()]

    async def nearby(self, board: str, player_id: str, radius: int) -> dict[str, Any]:
        """Exact live entries within ``radius`` positions of the player."""
        for _ in range(ATTEMPTS):
            me = await self.rank(board, player_id)
            base: Base = me["base"]
            score, position = me["score"], me["position"]
            achieved = me["achieved"]
            timed, unique = self._order(board)
            center = encode_entry(score, player_id, achieved)
            margin = radius + 16
            for _ in range(ATTEMPTS * 2):
                i0 = base.rows_before(score, player_id, achieved)
                lo, hi = max(0, i0 - margin), min(base.population, i0 + margin + 1)
                snap_min: bytes | str = ""
                snap_max: bytes | str = ""
                if hi > lo:
                    snap_min, snap_max = (
                        b"[" + base.encoded(lo),
                        b"[" + base.encoded(hi - 1),
                    )
                replies = await self._window(
                    board,
                    b"(" + center,
                    radius,
                    b"(" + center,
                    radius,
                    snap_min,
                    snap_max,
                )
                as_of = _as_of(replies)
                if as_of != me["asOf"]:
                    break  # something changed since the rank: start over
                changed = {m for r in replies for m in r[6]}
                snap_rows = [base.encoded(row) for row in range(lo, hi)]
                after_snap = [m for m in snap_rows if m > center and m not in changed]
                before_snap = [m for m in snap_rows if m < center and m not in changed]
                if (len(after_snap) < radius and hi < base.population) or (
                    len(before_snap) < radius and lo > 0
                ):
                    margin *= 4
                    continue
                after = sorted(after_snap + [m for r in replies for m in r[4]])[:radius]
                before = sorted(before_snap + [m for r in replies for m in r[5]])[
                    -radius:
                ]
                if radius == 0:
                    before, after = [], []
                window = [*before, center, *after]
                first_position = position - len(before)
                top_score = decode_entry(window[0], timed)[0]
                # Everything above the window's first score is outside the window: its
                # rank needs one count, read with the same positions as the rest.
                first_rank = None
                if unique:
                    first_rank = first_position
                elif top_score != score:
                    counted = await self._count_above(board, top_score, base)
                    if counted["asOf"] != me["asOf"]:
                        break
                    first_rank = counted["above"] + 1
                else:
                    first_rank = me["rank"]
                entries = _ranked(window, first_position, first_rank, timed, unique)
                return {**me, "entries": entries}
        raise NotExact("the board kept changing around the player")

    async def _count_above(self, board: str, score: int, base: Base) -> dict[str, Any]:
        replies, _ = await self._counts_round(
            board, encode_score(score), encode_score(score), None
        )
        return {
            "above": base.count_above(score)
            + sum(_int(r[2]) - _int(r[3]) for r in replies),
            "asOf": _as_of(replies),
        }

    async def approx_rank(self, board: str, player_id: str) -> dict[str, Any]:
        """Rank from the Fenwick histogram: players in higher buckets + 1, with the
        population of the player's own bucket as the error bound."""
        score = await self.live_total(board, player_id)
        if score is None:
            raise PlayerMissing(player_id)
        calls = []
        for p in range(self.partitions):
            keys = Keys(p)
            calls.append(
                (
                    [
                        keys.fenwick(board),
                        keys.buckets(board),
                        keys.base_generation,
                        keys.position,
                    ],
                    [score],
                )
            )
        counts = await self.speed.run_script(self._approx, calls)
        higher = sum(_int(c[0]) for c in counts)
        same = sum(_int(c[1]) for c in counts)
        population = sum(_int(c[2]) for c in counts)
        return {
            "score": score,
            "rank": higher + 1,
            # The true rank lies in [higher + 1, higher + same]; same >= 1 (the player).
            "errorBound": max(0, same - 1),
            "population": population,
            "asOf": {str(p): _int(c[4]) for p, c in enumerate(counts)},
        }


def _ranked(
    members: list[bytes],
    first_position: int,
    first_rank: int | None,
    timed: bool = False,
    unique: bool = False,
) -> list[dict[str, Any]]:
    """Entries for consecutive display positions; a score's rank is the position of its
    first holder (or ``first_rank`` for the window's first score); with ``unique``
    ranks every rank is the position."""
    entries: list[dict[str, Any]] = []
    rank = 0
    previous: int | None = None
    for offset, member in enumerate(members):
        score, player = decode_entry(member, timed)
        position = first_position + offset
        if unique:
            rank = position
        elif score != previous:
            rank = first_rank if (offset == 0 and first_rank is not None) else position
            previous = score
        entry: dict[str, Any] = {
            "position": position,
            "rank": rank,
            "playerId": player,
            "score": score,
        }
        if timed:
            # For keyset cursors only; the routes drop it from answers.
            entry["_t"] = decode_achieved(member)
        entries.append(entry)
    return entries
