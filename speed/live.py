"""Live reads: the base generation merged with the speed layer's changed players.

Exact live rank of score s (DESIGN.md):
    1 + (snapshot scores above s) - (changed players whose snapshot score is above s)
      + (changed players whose live score is above s)
summed over partitions. Each partition's part is read atomically by one Lua script,
and because an event touches only its own partition, the per-partition reads compose
into the exact state as of the position vector returned as ``asOf``. On one Redis
server one script call reads every partition (one atomic read of them all, and one
reply to parse); on a Redis Cluster the same script runs once per partition, since
a call's keys must share a hash slot (``LiveReader.fused``).

The snapshot is the partition's *base* generation (the one its changed-sets are
relative to); while a rebase is half done the partitions disagree, exactness is not
possible, and the answer comes from the histogram, labelled so.

Exact dense rank of s: 1 + distinct live scores above s = the base's distinct scores
above s, less the base values no player holds any more, plus the live values the
base does not hold. Whether a value is still held is a question about every
partition at once (two partitions can hold the same value), so it cannot be kept
per partition by the owner transaction; the API decodes each partition's
changed-set once per log position (:class:`DenseChanges`) and a dense read is the
stamp plus a few bisections while the partitions stay put; no write-path cost.

Held changed-sets: a partition's changed-set changes only with its stamp ("g|position|
flags version|epoch", the one live_counts.lua already keys its sizes by). Once enough
reads in a row found a partition at the same stamp (two, or one per
``HOLD_MEMBERS_PER_READ`` members of its changed-set: reading it whole is then paid
for by the counting it saves), the API reads its changed-set whole
(``live_dense.lua``, one round trip, once per stamp) and holds it
(:class:`HeldPart`); while the stamp holds, ``live_counts.lua`` and
``live_nearby.lua`` only verify it and the player's total there, and the API counts
and reads the window in what it holds (bisections). A partition written to between
two reads is counted in Redis again, as before; so a write-heavy board costs what
it did, and a board read far more often than written is counted without a
ZLEXCOUNT, BITCOUNT (the bitmap's bytes up to the entry) or window read per
partition and read.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
import secrets
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from redis.exceptions import NoScriptError

from conf.boards import board_order
from serving.registry import Generation, GenerationRegistry
from serving.segments import BoardSegment
from speed.baserows import PartitionRows, partition_rows, partition_rows_key
from speed.connection import (
    is_cluster,
    pack_with_prefix,
    packed_prefix,
    send_commands,
)
from speed.partitions import (
    EPOCH_KEY,
    SCORE_OFFSET,
    Keys,
    decode_achieved,
    decode_entry,
    encode_entry,
    encode_score,
    partition_of,
)
from speed.scripts import (
    APPROX_RANK,
    APPROX_TABLE,
    LIVE_COUNTS,
    LIVE_DENSE,
    LIVE_NEARBY,
    LIVE_STAMP,
    LIVE_WINDOW,
    READ_STAMP,
    register,
)
from speed.store import SpeedLayer

ATTEMPTS = 5
# A live nearby takes several round trips, each of which a write to its
# neighbourhood can move past; on a small board under a stream of writes about
# one attempt in ten is spoilt that way (session 25, four writer threads beside a
# clean-clone suite), and five in a row happened once in 300 reads. Twice the
# attempts, each after a random pause so that the retry does not keep step with
# the writes that spoilt the last one: up to NEARBY_JITTER_S, doubled with each
# retry up to NEARBY_JITTER_MAX_S (a loaded machine's round trips are longer, and
# so are the spells in which a write lands during one: two of 300 reads still
# failed ten attempts with a fixed 2 ms pause, session 31's CI at load 4). A
# rank whose player's score kept changing spoils one attempt, not the read.
NEARBY_ATTEMPTS = 2 * ATTEMPTS
NEARBY_JITTER_S = 0.002
NEARBY_JITTER_MAX_S = 0.064
# Outside the speed layer's namespace: not state a rebuild restores.
# Standings remembered per (board, player) for guessing the next read's score.
REMEMBERED = 100_000
# Rows per block of RowCounts' table.
ROW_BLOCK = 256


class NotExact(Exception):
    """Exactness is impossible right now (a rebase in progress, base not mapped)."""


class _Moved(Exception):
    """A counts call found the player verified at another total than the one
    guessed, and counted nothing (live_counts.lua's {"moved", total}): read
    again at ``raw`` (its "total|version[|achievedMs]"); ``flag``: its shadow
    flag when read in the same round trip, else None."""

    def __init__(self, raw: bytes, flag: bool | None) -> None:
        super().__init__("moved")
        self.raw = raw
        self.flag = flag


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

    def encoded_range(self, start: int, stop: int) -> list[bytes]:
        """Rows [start, stop) encoded as changed-set members, in one pass over the
        mapped columns (encoding row by row was a quarter of a live nearby's CPU)."""
        segment = self.segment
        if segment is None or stop <= start:
            return []
        if segment.achieved is not None:
            return [self.encoded(row) for row in range(start, stop)]
        keys = (SCORE_OFFSET - segment.scores[start:stop]).astype(">u8").tobytes()
        offsets = segment.players.offsets[start : stop + 1].tolist()
        first = offsets[0]
        names = bytes(segment.players.data[first : offsets[-1]])
        return [
            keys[8 * i : 8 * i + 8] + names[offsets[i] - first : offsets[i + 1] - first]
            for i in range(stop - start)
        ]

    def partition_rows(self, partitions: int) -> PartitionRows | None:
        """The segment's rows per partition: the changed-sets' snapshot side names
        local rows (speed/baserows.py)."""
        if self.generation is None or self.segment is None:
            return None
        return partition_rows(self.generation, self.segment.board, partitions)

    def row_counts(self, partitions: int) -> RowCounts | None:
        """:class:`RowCounts` of the segment's rows, kept with the generation."""
        rows = self.partition_rows(partitions)
        if rows is None or self.generation is None or self.segment is None:
            return None
        return self.generation.derive(
            row_counts_key(self.segment.board, partitions), lambda: RowCounts(rows)
        )

    def encoded_prefix(self, rows: int) -> list[bytes]:
        """The first ``rows`` rows encoded; cached on the immutable segment, since
        every live top list starts from the same rows."""
        if self.segment is None or rows <= 0:
            return []
        cache = self.segment.encoded_prefix
        if len(cache) < rows:
            cache.extend(self.encoded_range(len(cache), rows))
        return cache[:rows]


class RowCounts:
    """For a global row of a base segment, how many rows before it each partition
    owns (every partition's local bound, :meth:`PartitionRows.count_before`), in
    two vector steps for all partitions: a table of the counts at every
    ``ROW_BLOCK``-th row plus the owners of the rows since. One ``searchsorted``
    per partition and bound cost about 9 µs each, 16-32 of them per live rank or
    nearby (bench/RESULTS.md, issue 13)."""

    def __init__(self, rows: PartitionRows) -> None:
        self.partitions = rows.partitions
        self.owner = rows.owner
        blocks = len(self.owner) // ROW_BLOCK
        whole = blocks * ROW_BLOCK
        # One pass per partition over the owners seen as blocks (one flat bincount
        # needed two int64 arrays of the whole board: 1.6 GB at 100 M players).
        shaped = self.owner[:whole].reshape(blocks, ROW_BLOCK)
        per_block = np.empty((blocks, self.partitions), dtype=np.int64)
        for p in range(self.partitions):
            per_block[:, p] = np.count_nonzero(shaped == p, axis=1)
        self.table = np.zeros((blocks + 1, self.partitions), dtype=np.int64)
        np.cumsum(per_block, axis=0, out=self.table[1:])

    def before(self, row: int) -> list[int]:
        """Rows before global row ``row`` per partition (``row`` in [0, rows])."""
        block = row // ROW_BLOCK
        since = np.bincount(
            self.owner[block * ROW_BLOCK : row], minlength=self.partitions
        )
        return (self.table[block] + since).tolist()  # type: ignore[no-any-return]


def row_counts_key(board: str, partitions: int) -> str:
    """Where :meth:`Base.row_counts` keeps a board's counts in ``Generation.memo``."""
    return f"api.live.row_counts:{board}:{partitions}"


def generation_warmer(partitions: int) -> Callable[[Generation, Generation], None]:
    """A registry's warmer (serving/registry.py): a new generation maps the boards
    its predecessor had mapped and derives the partition rows and row counts that
    one had derived (the boards being read live), in the registry's thread, so
    that the first live reads after a rebase onto it find them ready (100 M
    players: seconds per board and worker, bench/RESULTS.md)."""

    def warm(new: Generation, previous: Generation) -> None:
        for board in previous.mapped_boards():
            segment = new.board(board)
            if segment is None:
                continue
            if partition_rows_key(board, partitions) not in previous.memo:
                continue
            rows = partition_rows(new, board, partitions)
            key = row_counts_key(board, partitions)
            if rows is not None and key in previous.memo:
                new.derive(key, partial(RowCounts, rows))

    return warm


# Boards whose decoded changed-sets a LiveReader keeps for dense ranks.
DENSE_BOARDS = 64


@dataclass(frozen=True, slots=True)
class DensePart:
    """One partition's changed-set of a board as of ``position``, decoded: the
    (oriented) scores of its changed base rows and its changed players' live
    scores, unsorted."""

    position: int
    removed: np.ndarray
    live: np.ndarray


@dataclass(frozen=True, slots=True)
class DenseCounts:
    """The changes of every partition merged into sorted value arrays, so that what
    a dense or competition rank needs above a score is a few bisections:

    * ``removed``, ``live``: the changed base rows' scores and the changed players'
      live scores (ascending, with repeats);
    * ``gone``: base values no player holds any more (every base holder changed,
      no changed player at it); ``added``: live values the base does not hold.

    Distinct live scores above s = the base's - gone above s + added above s.
    """

    removed: np.ndarray
    live: np.ndarray
    gone: np.ndarray
    added: np.ndarray

    @staticmethod
    def above(values: np.ndarray, score: int) -> int:
        """Values of an ascending array strictly above ``score``."""
        return int(len(values) - np.searchsorted(values, score, side="right"))


def merge_dense(segment: BoardSegment | None, parts: list[DensePart]) -> DenseCounts:
    """:class:`DenseCounts` of the partitions' changes against base ``segment``."""
    empty = np.zeros(0, np.int64)
    removed = np.sort(np.concatenate([empty, *(p.removed for p in parts)]))
    live = np.sort(np.concatenate([empty, *(p.live for p in parts)]))
    values, counts = np.unique(removed, return_counts=True)
    distinct_live = np.unique(live)
    if segment is None or segment.population == 0:
        return DenseCounts(removed, live, empty, distinct_live)
    held_before = segment_multiplicity(segment, values)
    emptied = values[counts == held_before]
    gone = emptied[~np.isin(emptied, distinct_live)]
    added = distinct_live[segment_multiplicity(segment, distinct_live) == 0]
    return DenseCounts(removed, live, gone, added)


def _replaced(values: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The ascending multiset ``values`` less ``old`` (each of its values held
    there as often) plus ``new``: O(len(values)) copying, no sort of it."""
    if len(old):
        old = np.sort(old)
        # The k-th repeat of a value in ``old`` takes the k-th copy in ``values``.
        repeat = np.arange(len(old)) - np.searchsorted(old, old, side="left")
        values = np.delete(values, np.searchsorted(values, old, side="left") + repeat)
    if len(new):
        new = np.sort(new)
        values = np.insert(values, np.searchsorted(values, new, side="left"), new)
    return values


def _difference(old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values ``old`` holds more often than ``new``, and the reverse), with their
    excess repeats: the multiset change from ``old`` to ``new`` (a write changes a
    few players of a partition, so both are small however large the parts)."""
    v_old, c_old = np.unique(old, return_counts=True)
    v_new, c_new = np.unique(new, return_counts=True)
    every = np.union1d(v_old, v_new)
    delta = np.zeros(len(every), np.int64)
    delta[np.searchsorted(every, v_new)] += c_new
    delta[np.searchsorted(every, v_old)] -= c_old
    return np.repeat(every[delta < 0], -delta[delta < 0]), np.repeat(
        every[delta > 0], delta[delta > 0]
    )


def update_dense(
    segment: BoardSegment | None,
    counts: DenseCounts,
    old: DensePart,
    new: DensePart,
) -> DenseCounts:
    """``counts`` (merged from parts that held ``old``) with ``old`` replaced by
    ``new``: equal to :func:`merge_dense` of the new parts (the same arrays), at
    the cost of the two parts' difference and a copy of the arrays instead of a
    sort of them: only the values whose count changed can enter or leave ``gone``
    and ``added``."""
    left_removed, joined_removed = _difference(old.removed, new.removed)
    left_live, joined_live = _difference(old.live, new.live)
    removed = _replaced(counts.removed, left_removed, joined_removed)
    live = _replaced(counts.live, left_live, joined_live)
    named = np.unique(
        np.concatenate([left_removed, joined_removed, left_live, joined_live])
    )
    if segment is None or segment.population == 0:
        held = np.zeros(len(named), np.int64)
    else:
        held = segment_multiplicity(segment, named)
    in_removed = np.searchsorted(removed, named, side="right") - np.searchsorted(
        removed, named, side="left"
    )
    in_live = np.searchsorted(live, named, side="right") - np.searchsorted(
        live, named, side="left"
    )
    now_gone = named[(in_removed > 0) & (in_removed == held) & (in_live == 0)]
    now_added = named[(in_live > 0) & (held == 0)]
    gone = _replaced(counts.gone, counts.gone[np.isin(counts.gone, named)], now_gone)
    added = _replaced(
        counts.added, counts.added[np.isin(counts.added, named)], now_added
    )
    return DenseCounts(removed, live, gone, added)


def segment_multiplicity(segment: BoardSegment, values: np.ndarray) -> np.ndarray:
    """How many base rows hold each of ``values`` (vectorized count_with)."""
    ascending = segment.ascending_scores()
    return np.searchsorted(ascending, values, side="right") - np.searchsorted(
        ascending, values, side="left"
    )


class DenseChanges:
    """A board's changed-sets, decoded per partition (:class:`DensePart`) for one
    base generation, flags version and epoch (``key``), and merged
    (:class:`DenseCounts`) for the positions they were read at. A part is read
    again only when its partition's log position moved; a shadow or restore (the
    flags version), a rebase or a rebuild (the epoch) drops them all."""

    def __init__(self, key: tuple[int, int, int], partitions: int) -> None:
        self.key = key
        self.parts: list[DensePart | None] = [None] * partitions
        self.merged: tuple[tuple[int, ...], DenseCounts] | None = None
        # The parts ``merged`` was made of (replaced ones are updated into it).
        self._merged_parts: list[DensePart] = []

    def stale(self, positions: list[int]) -> list[int]:
        """Partitions whose part is missing or read at another position."""
        return [
            p
            for p, part in enumerate(self.parts)
            if part is None or part.position != positions[p]
        ]

    def counts(
        self, segment: BoardSegment | None
    ) -> tuple[tuple[int, ...], DenseCounts]:
        """(the parts' positions, their merged counts), merged once per positions:
        after a write or a few, only the parts read again are replaced in the
        merged counts (:func:`update_dense`); merged whole when most moved."""
        parts = [part for part in self.parts if part is not None]
        assert len(parts) == len(self.parts)
        positions = tuple(part.position for part in parts)
        if self.merged is None:
            self.merged = (positions, merge_dense(segment, parts))
        elif self.merged[0] != positions:
            replaced = [
                (old, new)
                for old, new in zip(self._merged_parts, parts, strict=True)
                if old is not new
            ]
            if 2 * len(replaced) > len(parts):
                counts = merge_dense(segment, parts)
            else:
                counts = self.merged[1]
                for old, new in replaced:
                    counts = update_dense(segment, counts, old, new)
            self.merged = (positions, counts)
        self._merged_parts = parts
        return self.merged


# Members (and changed base rows) of a board's changed-sets, all partitions
# together, up to which a live read holds them whole to count in itself
# (HeldPart): reading a partition's whole costs about what a few hundred reads'
# counts in Redis cost at this size. With HELD_BOARDS, what a LiveReader holds is
# bounded (16 boards x 100,000 members and rows: ~150 MB at the worst).
HELD_MEMBERS = 100_000
# Boards whose changed-sets a LiveReader holds (all dropped when one more comes).
HELD_BOARDS = 16
# A partition's changed-set is read whole only once reads at its stamp have
# counted in Redis about what reading it whole costs (ski rental: a partition
# written between every few reads is never read whole, and one that stays put
# costs at most twice the counting it saves). Reading it whole costs Redis about
# 0.2 µs per member or row and the API as much to decode; counting in Redis
# costs a partition about 20 µs per read (2 ZLEXCOUNT, 2 BITCOUNT): one read's
# worth per HOLD_MEMBERS_PER_READ members, and never fewer than two reads (the
# stamp seen twice).
HOLD_MEMBERS_PER_READ = 50


@dataclass(frozen=True, slots=True)
class HeldPart:
    """One partition's changed-set of a board as of ``stamp`` (a live_counts.lua
    stamp, "g|position|flags version|epoch": the changed-set changes only with
    it), held by the API so that a live read counts in it itself while the stamp
    holds: ``live_counts.lua`` then reads the stamp and the verified total only,
    not a ZLEXCOUNT and BITCOUNT each per partition (BITCOUNT reads the bitmap's
    bytes up to the entry: ~16 KB per partition at 1,000,000 players).

    ``members``: the chz members in Redis' (byte) order; ``rows``: the set bits
    of chb (changed local base rows), ascending: ZLEXCOUNT chz - "(x" is then the
    members below x, BITCOUNT of bits [0, n) the rows below n
    (:meth:`LiveReader._count_held`)."""

    stamp: bytes
    members: list[bytes]
    rows: list[int]


@dataclass(frozen=True, slots=True)
class HeldBounds:
    """What a counts call asked per partition, for counting in held parts: the
    local base rows above the score and before the entry, and with a nearby's
    window (``around``) the encoded top score (b"": none), the local rows above
    it and the snapshot rows [first, stop) the window reads."""

    rows_above: list[int]
    rows_before: list[int]
    around: Around | None = None
    top: bytes = b""
    top_rows: list[int] | None = None
    first: list[int] | None = None
    stop: list[int] | None = None


def held_size(part: HeldPart) -> int:
    """What a held part counts against ``HELD_MEMBERS``: its members or its
    changed base rows, whichever are more (as the sizes a counts reply gives)."""
    return max(len(part.members), len(part.rows))


def held_part(reply: list[Any]) -> HeldPart:
    """A :class:`HeldPart` from a ``live_dense.lua`` reply group."""
    members = [m.encode() if isinstance(m, str) else bytes(m) for m in reply[2]]
    bitmap = reply[3]
    rows: list[int] = []
    if bitmap:
        bits = np.unpackbits(np.frombuffer(bytes(bitmap), dtype=np.uint8))
        rows = np.flatnonzero(bits).tolist()
    stamp = reply[4]
    return HeldPart(stamp.encode() if isinstance(stamp, str) else stamp, members, rows)


@dataclass(frozen=True, slots=True)
class Window:
    """What ``live_window.lua`` reads on every partition: up to ``forward_limit``
    changed players from ``forward_from`` on and ``backward_limit`` before
    ``backward_from`` (ZRANGEBYLEX bounds), and which base rows in
    [snap_lo, snap_hi) (global rows) are changed."""

    forward_from: bytes | str
    forward_limit: int
    backward_from: bytes | str
    backward_limit: int
    snap_lo: int = 0
    snap_hi: int = 0


@dataclass(frozen=True, slots=True)
class Around:
    """The window ``live_nearby.lua`` reads with a rank's counts: up to
    ``forward_limit`` changed players after the rank's entry, no further than
    ``forward_max``, and ``backward_limit`` before it, no further than
    ``backward_min`` (ZRANGEBYLEX bounds), which base rows in [snap_lo, snap_hi)
    (global rows) are changed, and the counts above score ``top`` (None:
    none)."""

    forward_limit: int
    backward_limit: int
    snap_lo: int
    snap_hi: int
    top: int | None = None
    forward_max: bytes | str = "+"
    backward_min: bytes | str = "-"


async def run_commands(
    client: Any, script: Any, commands: list[tuple[Any, ...]]
) -> list[Any]:
    """:func:`send_commands` for read-only commands and EVALSHAs of ``script`` (or
    of each script of a tuple): if Redis lost a script they are loaded and
    everything sent again (nothing was changed); any other error reply is raised."""
    replies = await send_commands(client, commands)
    if script is not None and any(isinstance(r, NoScriptError) for r in replies):
        for each in script if isinstance(script, tuple) else (script,):
            await client.script_load(each.script)
        replies = await send_commands(client, commands)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _changed_keys(keys: Keys, board: str) -> dict[str, str]:
    """The keys of a partition's group in every live read script: base hash, log
    position and the board's changed-set (live side, snapshot side)."""
    return {
        "base": keys.base_generation,
        "position": keys.position,
        "chz": keys.changed_live(board),
        "chb": keys.changed_snapshot(board),
        "chc": keys.changed_counts(board),
    }


# The positional ARGV groups LiveReader sends per partition, in declared order
# (built without the named-value dicts of ScriptInterface.args_of: they are per
# read): checked here against speed/scripts.py at import.
assert LIVE_COUNTS.argv_group == (
    "verify_player",
    "chb_above",
    "chb_before",
    "known",
    "held",
)
assert LIVE_COUNTS.keys == ("epoch",)
# Where live_counts.lua's sizes, verified total and stamp are in its replies.
assert [
    LIVE_COUNTS.fields.index(f) for f in ("chz_size", "chs_size", "verified", "stamp")
] == [6, 7, 8, 9]
assert LIVE_WINDOW.argv_group == ("snapshot_first", "snapshot_stop")
assert LIVE_DENSE.fields[4] == "stamp" and LIVE_DENSE.key_group == LIVE_COUNTS.key_group
# Where a live_nearby.lua reply's window and top counts are (LiveReader._count_held).
assert LIVE_NEARBY.fields[10:] == (
    "forward",
    "backward",
    "snapshot",
    "chz_top",
    "chs_top",
)
assert LIVE_NEARBY.argv_group == (
    *LIVE_COUNTS.argv_group,
    *LIVE_WINDOW.argv_group,
    "chb_top",
)
assert LIVE_NEARBY.fields[: len(LIVE_COUNTS.fields)] == LIVE_COUNTS.fields
# Where each field of a live_window.lua reply is in a live_nearby.lua one: a
# nearby's window is read with its counts, and handled as a window reply.
WINDOW_OF_NEARBY = [LIVE_NEARBY.fields.index(f) for f in LIVE_WINDOW.fields]
# Where the first four fields of a live_counts.lua reply (all a count above a
# score uses, LiveReader._counted_above) are in a live_nearby.lua one for its top.
assert LIVE_COUNTS.fields[:4] == (
    "base_generation",
    "position",
    "chz_above",
    "chs_above",
)
TOP_OF_NEARBY = [
    LIVE_NEARBY.fields.index(f)
    for f in ("base_generation", "position", "chz_top", "chs_top")
]

# Boards whose script keys a LiveReader keeps (LiveReader._board_keys).
KEYED_BOARDS = 1024


def _lex_bound(bound: bytes | str) -> bytes:
    return bound.encode() if isinstance(bound, str) else bound


def _lex_stop(members: list[bytes], bound: bytes | str) -> int:
    """Where members up to ZRANGEBYLEX max ``bound`` ("+", or "[" and a member:
    inclusive) end in ascending ``members``."""
    raw = _lex_bound(bound)
    if raw == b"+":
        return len(members)
    assert raw[:1] == b"["
    return bisect.bisect_right(members, raw[1:])


def _lex_start(members: list[bytes], bound: bytes | str) -> int:
    """Where members from ZREVRANGEBYLEX min ``bound`` ("-", or "[" and a member:
    inclusive) start in ascending ``members``."""
    raw = _lex_bound(bound)
    if raw == b"-":
        return 0
    assert raw[:1] == b"["
    return bisect.bisect_left(members, raw[1:])


def _parts(replies: list[Any]) -> list[list[Any]]:
    """Per-partition replies of live script calls: each call's reply is a list of
    one reply per partition group it named (all of them in one call on one server,
    one per call on a cluster)."""
    if len(replies) == 1:
        return replies[0]  # type: ignore[no-any-return]
    return [part for reply in replies for part in reply]


def _as_of(replies: list[list[Any]]) -> dict[str, int]:
    """Log positions per partition, the second value of every live script reply."""
    return {str(p): r[1] for p, r in enumerate(replies)}


def _based_on(replies: list[list[Any]], base: Base) -> bool:
    """Whether every partition's reply was read against ``base``."""
    number = base.generation.number if base.generation is not None else 0
    return all(r[0] == number for r in replies)


def _int(value: Any) -> int:
    return int(value.decode() if isinstance(value, bytes) else value)


def _total(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    return int(raw.split(b"|", 1)[0])


def segment_standing(
    segment: BoardSegment | None, player_id: str
) -> tuple[int, int | None] | None:
    """(score, achievedMs or None) of a player in a base segment, None when not on
    it: the live standing of a player without a total in Redis (unchanged since
    its partition's base generation, speed/rebase.py)."""
    if segment is None:
        return None
    row = segment.row_of(player_id)
    if row is None:
        return None
    achieved = segment.achieved
    return int(segment.scores[row]), None if achieved is None else int(achieved[row])


def parse_standing(raw: bytes | None) -> tuple[int, int | None] | None:
    """(total, achievedMs or None) of a totals value "total|version[|achievedMs]"."""
    if raw is None:
        return None
    parts = raw.split(b"|")
    return int(parts[0]), int(parts[2]) if len(parts) > 2 else None


@dataclass(frozen=True, slots=True)
class RowHint:
    """A player's ``row`` in a mapped base ``segment``, where it holds
    ``standing``: a live rank's first row at or after that standing there, with no
    bisection of the segment. The segment itself, not its generation's number,
    names the base (a replaced dataset numbers its generations again), held
    weakly (a retired generation's mapping is not kept alive by a hint)."""

    segment: weakref.ref[BoardSegment]
    row: int
    standing: tuple[int, int | None]

    def row_in(self, base: Base, standing: tuple[int, int | None]) -> int | None:
        """The row, when ``base`` is that segment and ``standing`` that one."""
        if base.segment is None or self.segment() is not base.segment:
            return None
        return self.row if standing == self.standing else None


class LiveReader:
    """Exact live and approximate reads over Redis plus the mapped generations."""

    def __init__(self, speed: SpeedLayer, registry: GenerationRegistry) -> None:
        self.speed = speed
        self.registry = registry
        client = speed.client
        self._counts = register(client, LIVE_COUNTS)
        self._dense_script = register(client, LIVE_DENSE)
        self._window_script = register(client, LIVE_WINDOW)
        self._nearby_script = register(client, LIVE_NEARBY)
        self._approx = register(client, APPROX_RANK)
        self._approx_table = register(client, APPROX_TABLE)
        self._stamp_script = register(client, LIVE_STAMP)
        self._read_stamp_script = register(client, READ_STAMP)
        self._stamp_commands: list[tuple[Any, ...]] | None = None
        self._read_stamp_keys: list[str] | None = None
        self._flags_and_epoch: tuple[Any, ...] | None = None
        # One server: a live read is one script call naming every partition (one
        # atomic read of them all, one reply; bench/live_cpu.py measures it
        # against one call per partition). A cluster: one call per partition,
        # since a call's keys must share a hash slot. Settable (tests compare).
        self.fused = not is_cluster(client)
        self._board_keys: OrderedDict[str, tuple[list[list[str]], list[list[str]]]] = (
            OrderedDict()
        )
        self._last_bases: list[int] | None = None
        # Per board (fused only): per partition, (stamp, |chz|, changed base
        # rows) as last counted, sent as "known" so that the script need not
        # count them again while the stamp holds (_known_sizes).
        self._sizes: dict[str, list[tuple[bytes, int, int] | None]] = {}
        # Per board (fused only): per partition, its changed-set as of a stamp,
        # held to count in while the stamp holds (HeldPart); read once enough
        # reads in a row found the same stamp (_stable, _hold).
        self._held: dict[str, list[HeldPart | None]] = {}
        # Per board (fused only): per partition, how many reads in a row found
        # its stamp unchanged (_stable).
        self._streaks: dict[str, list[int]] = {}
        # Per (script sha, keys): the fused EVALSHA's packed head (_script_calls).
        self._prefixes: dict[tuple[str, tuple[str, ...]], tuple[int, bytes]] = {}
        # Per (board, player): its standing as last read, and where it is in a
        # base generation when known (RowHint).
        self._standings: OrderedDict[
            tuple[str, str], tuple[tuple[int, int | None], RowHint | None]
        ] = OrderedDict()
        # Per board: its changed-sets decoded for dense ranks (see above()).
        self._dense: OrderedDict[str, DenseChanges] = OrderedDict()
        # Per board: the changed-sets read whole in flight (_refresh_dense).
        self._dense_reading: dict[str, asyncio.Future[None]] = {}
        # Per board: (the boards it was read from, its order), see _order().
        self._orders: dict[str, tuple[Any, tuple[bool, bool]]] = {}

    @property
    def partitions(self) -> int:
        return self.speed.partitions

    def _order(self, board: str) -> tuple[bool, bool]:
        """(first_achieved, unique rank) of the board, kept per board while the
        speed layer's boards are the same object (a rule reload replaces it):
        working it out from the boards file's rules was 3 % of a live nearby's
        API CPU (py-spy, session 16), asked two or three times per read."""
        boards = self.speed.boards
        known = self._orders.get(board)
        if known is not None and known[0] is boards:
            return known[1]
        order = board_order(boards, board)
        if len(self._orders) >= KEYED_BOARDS:
            self._orders.clear()
        self._orders[board] = (boards, order)
        return order

    async def _standing(
        self, board: str, player_id: str
    ) -> tuple[tuple[int, int | None] | None, bool]:
        """(the player's live standing, whether it is shadowed): one round trip."""
        keys = Keys(partition_of(player_id, self.partitions))
        raw, flag, number = await run_commands(
            self.speed.client,
            None,
            [
                ("HGET", keys.totals(board), player_id),
                ("HGET", keys.flags, player_id),
                ("HGET", keys.base_generation, "g"),
            ],
        )
        standing = parse_standing(raw.encode() if isinstance(raw, str) else raw)
        if standing is None:
            standing = self.base_standing(board, player_id, _int(number or 0))
        return standing, flag in (b"shadow", "shadow")

    def base_standing(
        self, board: str, player_id: str, number: int
    ) -> tuple[int, int | None] | None:
        """The player's standing in base generation ``number`` (what a pair without
        a total in Redis stands at), None when not on it or not mapped."""
        if number <= 0:
            return None
        generation = self.registry.by_number(number)
        if generation is None:
            self.registry.refresh(force=True)
            generation = self.registry.by_number(number)
        if generation is None:
            return None
        return segment_standing(generation.board(board), player_id)

    async def _base(self, bases: list[int], board: str) -> Base:
        """:meth:`mapped_base`, with what live reads count its rows with
        (:meth:`_derived`)."""
        base = self.mapped_base(bases, board)
        await self._derived(base)
        return base

    def mapped_base(self, bases: list[int], board: str) -> Base:
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

    async def _derived(self, base: Base) -> None:
        """The base's partition rows and row counts, derived in a worker thread when
        not yet (a registry's warmer derives them for the generations after the
        first): at 100 M players that takes 23-27 s, which on the event loop
        stalled every other request of the worker behind the first live read
        (speed/baserows.py derive_partition_rows)."""
        generation, segment = base.generation, base.segment
        if generation is None or segment is None:
            return
        if row_counts_key(segment.board, self.partitions) in generation.memo:
            return
        await asyncio.to_thread(base.row_counts, self.partitions)

    async def live_total(self, board: str, player_id: str) -> int | None:
        keys = Keys(partition_of(player_id, self.partitions))
        raw, number = await run_commands(
            self.speed.client,
            None,
            [
                ("HGET", keys.totals(board), player_id),
                ("HGET", keys.base_generation, "g"),
            ],
        )
        total = _total(raw.encode() if isinstance(raw, str) else raw)
        if total is None:
            standing = self.base_standing(board, player_id, _int(number or 0))
            total = None if standing is None else standing[0]
        return total

    def guess(self, board: str, player_id: str) -> tuple[int, int | None] | None:
        """The player's standing as last read, else in the latest generation, else
        None: a guess, always checked against Redis in the same round trip."""
        return self._guess(board, player_id)[0]

    def _guess(
        self, board: str, player_id: str
    ) -> tuple[tuple[int, int | None] | None, RowHint | None]:
        """:meth:`guess`, with the player's row in a base generation when known."""
        known = self._standings.get((board, player_id))
        if known is not None:
            return known
        latest = self.registry.latest()
        segment = latest.board(board) if latest is not None else None
        if latest is None or segment is None:
            return None, None
        row = segment.row_of(player_id)
        if row is None:
            return None, None
        achieved = segment.achieved
        standing = (
            int(segment.scores[row]),
            None if achieved is None else int(achieved[row]),
        )
        return standing, RowHint(weakref.ref(segment), row, standing)

    def remember(
        self,
        board: str,
        player_id: str,
        standing: tuple[int, int | None],
        hint: RowHint | None = None,
    ) -> None:
        key = (board, player_id)
        self._standings[key] = (standing, hint)
        self._standings.move_to_end(key)
        if len(self._standings) > REMEMBERED:
            self._standings.popitem(last=False)

    def _keys_of(self, board: str) -> tuple[list[list[str]], list[list[str]]]:
        """Per partition, the board's keys of ``live_window.lua`` and
        ``live_dense.lua`` (their groups), and of ``live_counts.lua`` and
        ``live_nearby.lua`` (theirs): built once per board, not per read."""
        cached = self._board_keys.get(board)
        if cached is None:
            groups = [_changed_keys(Keys(p), board) for p in range(self.partitions)]
            window = [LIVE_WINDOW.keys_of({}, [g]) for g in groups]
            counts = [
                LIVE_COUNTS.keys_of({"epoch": EPOCH_KEY}, [g])[1:]
                for g in (
                    {
                        **g,
                        "totals": Keys(p).totals(board),
                        "flags_version": Keys(p).flags_version,
                    }
                    for p, g in enumerate(groups)
                )
            ]
            assert [c[:5] for c in counts] == window
            cached = self._board_keys[board] = (window, counts)
            while len(self._board_keys) > KEYED_BOARDS:
                self._board_keys.popitem(last=False)
        return cached

    def _script_calls(
        self,
        sha: str,
        key_groups: list[list[str]],
        args: tuple[Any, ...],
        arg_groups: list[tuple[Any, ...]],
        epoch_key: bool = False,
    ) -> list[Any]:
        """EVALSHA commands of a live script reading the partitions of
        ``key_groups`` (with their ``arg_groups``, after the fixed ``args``): one
        naming them all when ``fused``, else one per partition. With
        ``epoch_key`` the keys start with the epoch's (fused), or with the
        group's second key, its position, on a cluster (one slot per call)."""
        if self.fused:
            # The EVALSHA, its sha and keys are packed once per script and keys
            # (they are the same for every read of a board); only the arguments
            # are packed per read.
            keys = tuple(k for group in key_groups for k in group)
            if epoch_key:
                keys = (EPOCH_KEY, *keys)
            prefix = self._prefixes.get((sha, keys))
            if prefix is None:
                if len(self._prefixes) >= 4 * KEYED_BOARDS:
                    self._prefixes.clear()
                prefix = self._prefixes[(sha, keys)] = packed_prefix(
                    ("EVALSHA", sha, len(keys), *keys)
                )
            return [
                pack_with_prefix(
                    prefix, [*args, *(a for group in arg_groups for a in group)]
                )
            ]
        return [
            (
                "EVALSHA",
                sha,
                len(keys) + epoch_key,
                *((keys[1],) if epoch_key else ()),
                *keys,
                *args,
                *more,
            )
            for keys, more in zip(key_groups, arg_groups, strict=True)
        ]

    async def _counts_round(
        self,
        board: str,
        above: bytes,
        before: bytes,
        player_id: str | None,
        base: Base,
        rows_above: int,
        rows_before: int,
        read_flag: bool = False,
        extra: list[tuple[Any, ...]] | None = None,
        extra_scripts: tuple[Any, ...] = (),
        around: Around | None = None,
        expected: int | None = None,
    ) -> tuple[list[list[Any]], list[Any], bool | None]:
        """``live_counts.lua`` on every partition in one round trip; the partition
        owning ``player_id`` also returns that player's current total. With
        ``read_flag`` the player's shadow flag is read in the same round trip
        (else None comes back). ``rows_above``/``rows_before`` are global rows of
        ``base``; the replies name the base they were read against (the caller
        compares). ``extra`` commands (``live_window.lua`` and ``live_counts.lua``
        calls, and those of any ``extra_scripts``, e.g. the stamp's) go in the
        same write. With ``around``, the counts are read by ``live_nearby.lua``
        with that window around ``before`` (the partitions' replies then hold
        its fields, the counts first, then the window and the counts above
        ``around.top``). As (the partitions' counts, the replies of the
        ``extra`` commands, the flag); :class:`_Moved` when ``player_id`` holds
        another total than ``expected`` (its guessed one, None: not checked)."""
        commands: list[tuple[Any, ...]] = []
        flagged = read_flag and bool(player_id)
        if flagged:
            assert player_id is not None
            owner = partition_of(player_id, self.partitions)
            commands.append(("HGET", Keys(owner).flags, player_id))
        known = self._known_sizes(board)
        held = self._held_parts(board)
        counted, bounds = self._counts_commands(
            board,
            above,
            before,
            player_id,
            base,
            rows_above,
            rows_before,
            around,
            known,
            expected,
            held,
        )
        commands += counted
        n = len(commands)
        script = self._counts if around is None else self._nearby_script
        scripts = (
            (script, self._counts, self._window_script, *extra_scripts)
            if extra
            else script
        )
        replies = await run_commands(
            self.speed.client, scripts, commands + extra if extra else commands
        )
        flag = replies[0] in (b"shadow", "shadow") if flagged else None
        for reply in replies[int(flagged) : n]:
            if reply and reply[0] in (b"moved", "moved"):
                raw = reply[1]
                raise _Moved(raw.encode() if isinstance(raw, str) else raw, flag)
        counts = _parts(replies[int(flagged) : n])
        self._count_held(counts, held, above, before, bounds)
        # Stamps the script found unchanged since the last read (sizes left out).
        unchanged = [reply[6] == -1 for reply in counts]
        kept = self._held.get(board)
        for p, (part, reply) in enumerate(zip(held, counts, strict=True)):
            if part is not None and part.stamp != reply[9] and kept is not None:
                # Moved since it was read: read again once its new stamp holds.
                if kept[p] is part:
                    kept[p] = None
        # Sizes (and changed-sets) are kept only under an epoch (a replaced
        # dataset's positions restart; its new epoch tells its stamps apart):
        # the read caches' stamps set it on their first use, else the first
        # fused read that finds none (a round trip, once per dataset: without
        # it a board read only by live ranks and nearbys never held a part).
        if not self._sized(board, counts, known) and self.fused:
            await self._epoch(0)
        stable = self._stable(board, counts, held, unchanged)
        if stable:
            await self._hold(board, counts, stable)
        return counts, replies[n:], flag

    def _stable(
        self,
        board: str,
        counts: list[list[Any]],
        held: list[HeldPart | None],
        unchanged: list[bool],
    ) -> list[int]:
        """Partitions not held whose stamp enough reads in a row found unchanged
        to be read whole now (``HOLD_MEMBERS_PER_READ``); ``counts`` with their
        sizes filled in (:meth:`_sized`). Counts this read in the streaks."""
        if not self.fused:
            return []
        streaks = self._streaks.get(board)
        if streaks is None:
            if len(self._streaks) >= KEYED_BOARDS:
                self._streaks.clear()
            streaks = self._streaks[board] = [0] * self.partitions
        stable = []
        for p, reply in enumerate(counts):
            streaks[p] = streaks[p] + 1 if unchanged[p] else 1
            if held[p] is None and streaks[p] >= max(
                2, math.ceil(max(reply[6], reply[7]) / HOLD_MEMBERS_PER_READ)
            ):
                stable.append(p)
        return stable

    def _held_parts(self, board: str) -> list[HeldPart | None]:
        """Per partition, the changed-set held for ``board`` (None: none); all
        None on a cluster (see :meth:`_known_sizes`)."""
        if not self.fused:
            return [None] * self.partitions
        held = self._held.get(board)
        if held is None:
            if len(self._held) >= HELD_BOARDS:
                self._held.clear()
            held = self._held[board] = [None] * self.partitions
        return list(held)

    @staticmethod
    def _count_held(
        counts: list[list[Any]],
        held: list[HeldPart | None],
        above: bytes,
        before: bytes,
        bounds: HeldBounds,
    ) -> None:
        """What a reply left to the caller (-1: it holds the partition's
        changed-set for the reply's stamp) counted and read in the held parts, in
        place: the six counts, and for a live_nearby.lua reply its window (as
        ZRANGEBYLEX, ZREVRANGEBYLEX and the chb bits there would) and the counts
        above its top."""
        around = bounds.around
        left = bisect.bisect_left
        rows_above, rows_before = bounds.rows_above, bounds.rows_before
        # Inlined (HeldPart.counts per partition cost twice as much in calls and
        # tuples as the bisections themselves).
        for p, reply in enumerate(counts):
            if reply[2] != -1:
                continue
            part = held[p]
            assert part is not None and part.stamp == reply[9]
            members, rows = part.members, part.rows
            reply[2] = left(members, above)
            reply[3] = left(rows, rows_above[p])
            reply[4] = left(members, before)
            reply[5] = left(rows, rows_before[p])
            reply[6] = len(members)
            reply[7] = len(rows)
            if around is None:
                continue
            assert bounds.first is not None and bounds.stop is not None
            assert bounds.top_rows is not None
            forward: list[bytes] = []
            if around.forward_limit > 0:
                start = bisect.bisect_right(members, before)
                end = _lex_stop(members, around.forward_max)
                forward = members[start : min(end, start + around.forward_limit)]
            backward: list[bytes] = []
            if around.backward_limit > 0:
                end = bisect.bisect_left(members, before)
                low = _lex_start(members, around.backward_min)
                backward = members[max(low, end - around.backward_limit) : end][::-1]
            first, stop = bounds.first[p], bounds.stop[p]
            snapshot = (
                rows[bisect.bisect_left(rows, first) : bisect.bisect_left(rows, stop)]
                if stop > first
                else []
            )
            top_counts = (
                [
                    bisect.bisect_left(members, bounds.top),
                    bisect.bisect_left(rows, bounds.top_rows[p]),
                ]
                if bounds.top
                else [0, 0]
            )
            reply[10:15] = [forward, backward, snapshot, *top_counts]

    async def _hold(
        self, board: str, counts: list[list[Any]], stable: list[int]
    ) -> None:
        """Reads whole the changed-sets of the ``stable`` partitions (their stamp
        unchanged over enough reads, :meth:`_stable`: one round trip, once per
        stamp) to hold them (:class:`HeldPart`, :meth:`_admit`) while their stamp
        holds, as many as fit in ``HELD_MEMBERS`` with the board's other held
        parts."""
        held = self._held.get(board)
        if not stable or held is None:
            return
        # Only the partitions that fit in what the board may still hold (sizes as
        # ``counts`` found them): one read whole that would be refused is wasted.
        room = HELD_MEMBERS - sum(
            held_size(h)
            for q, h in enumerate(held)
            if h is not None and q not in stable
        )
        chosen = []
        for p in stable:
            size = max(counts[p][6], counts[p][7])
            if size <= room:
                chosen.append(p)
                room -= size
        if not chosen:
            return
        replies = await self._read_whole(board, chosen)
        for p, reply in zip(chosen, replies, strict=True):
            self._admit(held, p, held_part(reply))

    @staticmethod
    def _admit(held: list[HeldPart | None], p: int, part: HeldPart) -> None:
        """Hold ``part`` as partition ``p``'s changed-set (the one rule of both
        paths that read changed-sets whole, :meth:`_hold` and the dense counts'
        :meth:`_dense_parts`): only under an epoch (a stamp ending "|0" names
        none: a replaced dataset's positions restart), and only while the board's
        held parts stay within ``HELD_MEMBERS`` in all, the memory bound."""
        if part.stamp.endswith(b"|0"):
            return
        others = sum(
            held_size(h) for q, h in enumerate(held) if h is not None and q != p
        )
        if others + held_size(part) <= HELD_MEMBERS:
            held[p] = part

    def _known_sizes(self, board: str) -> list[tuple[bytes, int, int] | None]:
        """Per partition, (stamp, |chz|, changed base rows) as a live read last
        counted them on ``board``, None when unknown; all None on a cluster (the
        epoch cannot be read with a partition's keys there)."""
        if not self.fused:
            return [None] * self.partitions
        known = self._sizes.get(board)
        if known is None:
            if len(self._sizes) >= KEYED_BOARDS:
                self._sizes.clear()
            known = self._sizes[board] = [None] * self.partitions
        return list(known)

    def _sized(
        self,
        board: str,
        counts: list[list[Any]],
        known: list[tuple[bytes, int, int] | None],
    ) -> bool:
        """The sizes a counts reply left out (-1: the ``known`` ones, for the
        stamp the script found) filled in, in place; the ones it counted kept
        for the next read of the board, unless their stamp names no epoch
        (False then)."""
        kept = self._sizes.get(board) if self.fused else None
        epoch = True
        for p, reply in enumerate(counts):
            if reply[6] == -1:
                sizes = known[p]
                assert sizes is not None and sizes[0] == reply[9]
                reply[6], reply[7] = sizes[1], sizes[2]
            elif kept is not None:
                if reply[9].endswith(b"|0"):
                    epoch = False
                else:
                    kept[p] = (reply[9], reply[6], reply[7])
        return epoch

    def _counts_commands(
        self,
        board: str,
        above: bytes,
        before: bytes,
        player_id: str | None,
        base: Base,
        rows_above: int,
        rows_before: int,
        around: Around | None = None,
        known: list[tuple[bytes, int, int] | None] | None = None,
        expected: int | None = None,
        held: list[HeldPart | None] | None = None,
    ) -> tuple[list[tuple[Any, ...]], HeldBounds]:
        """``live_counts.lua`` on every partition, or ``live_nearby.lua`` with
        ``around`` (see :meth:`_counts_round`); ``known``: per partition the
        sizes held for a stamp (:meth:`_known_sizes`); ``held``: the changed-sets
        held (:meth:`_held_parts`). As (the commands, the bounds the held parts
        are counted at: per partition the local rows above and before, the
        encoded top score (b"" none) and the local rows above it)."""
        partitions = self.partitions
        owner = partition_of(player_id, partitions) if player_id else -1
        counts = base.row_counts(partitions)
        local_above = counts.before(rows_above) if counts else [0] * partitions
        local_before = (
            counts.before(rows_before)
            if counts and rows_before != rows_above
            else local_above
        )
        keys = self._keys_of(board)[1]
        known = known or [None] * partitions
        held = held or [None] * partitions
        groups = [
            (
                player_id if p == owner else "",
                local_above[p],
                local_before[p],
                h.stamp if h is not None else b"" if k is None else k[0],
                b"" if h is None else b"1",
            )
            for p, (k, h) in enumerate(zip(known, held, strict=True))
        ]
        guessed = "" if expected is None else expected
        top = b""
        top_rows = [0] * partitions
        if around is None:
            return self._script_calls(
                self._counts.sha, keys, (above, before, guessed), groups, epoch_key=True
            ), HeldBounds(local_above, local_before)
        first, stop = self._snapshot_bounds(base, around.snap_lo, around.snap_hi)
        if around.top is not None:
            top = encode_score(around.top)
            if counts is not None:
                top_rows = counts.before(base.count_above(around.top))
        return self._script_calls(
            self._nearby_script.sha,
            keys,
            (
                above,
                before,
                guessed,
                around.forward_limit,
                around.backward_limit,
                around.forward_max,
                around.backward_min,
                top,
            ),
            [
                (*g, f, s, t)
                for g, f, s, t in zip(groups, first, stop, top_rows, strict=True)
            ],
            epoch_key=True,
        ), HeldBounds(local_above, local_before, around, top, top_rows, first, stop)

    async def _assumed_base(self, board: str) -> tuple[list[int], Base]:
        """The base the partitions had last time, else the latest generation: a
        guess (no round trip), checked against every reply; read from Redis when
        it cannot be mapped."""
        numbers = self._last_bases
        if numbers is None:
            latest = self.registry.latest()
            numbers = [latest.number if latest else 0] * self.partitions
        try:
            return numbers, await self._base(numbers, board)
        except NotExact:
            numbers = self._last_bases = await self._bases()
            return numbers, await self._base(numbers, board)

    async def rank(
        self,
        board: str,
        player_id: str,
        extra_for: Callable[[int, int | None, Base, int], list[tuple[Any, ...]]]
        | None = None,
        extra_scripts: tuple[Any, ...] = (),
        around_for: Callable[[int, Base, int], Around] | None = None,
    ) -> dict[str, Any]:
        """Exact live score, rank, position and population of one player (and
        ``above``: the players strictly above its score).

        One round trip when the player's standing is guessed right (as last read,
        or in the latest generation): the owner partition verifies it in the same
        atomic read as its counts; a wrong guess costs one more round trip.
        ``extra_for(score, achieved, base, base_row)`` names commands to send with
        the counts (for the standing and base they assume; ``base_row``: the
        standing's first row at or after it in the base); their replies come back
        as ``extra``, one per command (read with the counts that verified that
        standing), and that row as ``base_row``; ``extra_scripts``: the scripts
        they call besides ``live_window.lua`` and ``live_counts.lua``.
        ``around_for(score, base, base_row)`` names a window to read with the
        counts, in the same script call (``live_nearby.lua``): the partitions'
        replies of that script come back as ``around``."""
        owner = partition_of(player_id, self.partitions)
        _, unique = self._order(board)
        standing, hint = self._guess(board, player_id)
        shadowed: bool | None = None
        if standing is None:
            standing, shadowed = await self._standing(board, player_id)
        # The snapshot side is counted in base rows: assume the base seen last.
        assumed, base = await self._assumed_base(board)
        for _ in range(ATTEMPTS):
            if standing is None:
                raise PlayerMissing(player_id)
            score, achieved = standing
            # Base rows above the score and before the standing: bisections of
            # the mapped segment, each done once per attempt; the second is the
            # player's own row when it holds that standing in this base.
            own_row = hint.row_in(base, standing) if hint is not None else None
            rows_above = base.count_above(score)
            rows_before = (
                own_row
                if own_row is not None
                else base.rows_before(score, player_id, achieved)
            )
            extra = extra_for(score, achieved, base, rows_before) if extra_for else []
            around = around_for(score, base, rows_before) if around_for else None
            try:
                replies, extra_replies, flag = await self._counts_round(
                    board,
                    encode_score(score),
                    encode_entry(score, player_id, achieved),
                    player_id,
                    base,
                    rows_above,
                    rows_before,
                    read_flag=shadowed is None,
                    extra=extra,
                    extra_scripts=extra_scripts,
                    around=around,
                    expected=score,
                )
            except _Moved as moved:
                # Another total than guessed: nothing was counted (one HGET in
                # Redis); read again at it, as below when a count finds it moved.
                if moved.flag is not None:
                    shadowed = moved.flag
                standing = parse_standing(moved.raw)
                continue
            if flag is not None:
                shadowed = flag
            seen = [r[0] for r in replies]
            if seen != assumed:
                # Rebased since: the base row counts were for another generation.
                base = await self._base(seen, board)
                assumed = seen
                self._last_bases = seen
                continue
            verified = replies[owner][8]
            # No total in Redis: unchanged since the base these counts were read
            # against (checked just above), which holds its score.
            if verified:
                current = parse_standing(verified)
            elif own_row is not None:
                current = standing  # its base row, read above
            else:
                current = segment_standing(base.segment, player_id)
            if current != standing:
                # The player moved since the guess (or between the two reads): read
                # again at the new score.
                standing = current
                continue
            if own_row is None and not verified and base.segment is not None:
                # Unchanged since the base: its row there is rows_before.
                hint = RowHint(weakref.ref(base.segment), rows_before, standing)
            self.remember(board, player_id, standing, hint)
            above = before = population = 0
            for r in replies:
                above += r[2] - r[3]
                before += r[4] - r[5]
                population += r[6] - r[7]
            above += rows_above
            before += rows_before
            population += base.population
            return {
                "score": score,
                "achieved": achieved,
                "rank": before + 1 if unique else above + 1,
                "above": above,
                "position": before + 1,
                "population": population,
                "asOf": _as_of(replies),
                "base": base,
                # Shadowed players are out of every count: their own read adds
                # them back (api/reads.py).
                "shadowed": bool(shadowed),
                "extra": extra_replies,
                "base_row": rows_before,
                "around": None if around is None else replies,
            }
        raise NotExact("the player's score kept changing")

    def _window_commands(
        self, board: str, window: Window, base: Base
    ) -> list[tuple[Any, ...]]:
        """``live_window.lua`` on every partition (see :meth:`_window`)."""
        first, stop = self._snapshot_bounds(base, window.snap_lo, window.snap_hi)
        args = (
            window.forward_from,
            window.forward_limit,
            window.backward_from,
            window.backward_limit,
        )
        return self._script_calls(
            self._window_script.sha,
            self._keys_of(board)[0],
            args,
            list(zip(first, stop, strict=True)),
        )

    def _snapshot_bounds(
        self, base: Base, lo: int, hi: int
    ) -> tuple[list[int], list[int]]:
        """Global rows [lo, hi) of ``base`` as each partition's local rows
        [first, stop) (speed/baserows.py)."""
        partitions = self.partitions
        counts = base.row_counts(partitions)
        if counts is None or hi <= lo:
            return [0] * partitions, [0] * partitions
        return counts.before(lo), counts.before(hi)

    def _window_changed(self, replies: list[list[Any]], base: Base) -> set[int]:
        """The global rows of ``base`` the window replies name as changed."""
        rows = base.partition_rows(self.partitions)
        changed: set[int] = set()
        if rows is not None:
            for p, reply in enumerate(replies):
                changed.update(rows.global_row(p, local) for local in reply[6])
        return changed

    async def _window(
        self, board: str, window: Window, base: Base
    ) -> tuple[list[list[Any]], set[int]]:
        """``live_window.lua`` on every partition, and which global rows of ``base``
        in [snap_lo, snap_hi) are changed (their players are read from chz)."""
        commands = self._window_commands(board, window, base)
        replies = _parts(
            await run_commands(self.speed.client, self._window_script, commands)
        )
        return replies, self._window_changed(replies, base)

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
                base = await self._base(base_numbers, board)
            except NotExact:
                base_numbers = await self._bases()
                continue
            take = min(rows, base.population)
            encoded = base.encoded_prefix(take)
            replies, changed = await self._window(
                board, Window("-", limit, "+", 0, 0, take), base
            )
            seen = [r[0] for r in replies]
            if seen != base_numbers:
                base_numbers = seen
                continue
            self._last_bases = seen
            unchanged = [m for row, m in enumerate(encoded) if row not in changed]
            if len(unchanged) < limit and take < base.population:
                return None
            live = [m for r in replies for m in r[4]]
            merged = sorted(unchanged + live)[:limit]
            timed, unique = self._order(board)
            entries = _ranked(
                merged, first_position=1, first_rank=None, timed=timed, unique=unique
            )
            population = base.population + sum(r[2] - r[3] for r in replies)
            return {
                "entries": entries,
                "population": population,
                "asOf": _as_of(replies),
                "base": base,
            }
        raise NotExact("a rebase is in progress")

    async def above(self, board: str, score: int) -> dict[str, Any]:
        """Players and distinct scores strictly above ``score`` in the live state,
        exactly as of ``asOf``: the base generation's, less the changed players'
        base rows above the score (a value is gone only when no player holds it
        any more), plus the changed players' live totals above it.

        One round trip (the stamp) and a few bisections while the board's
        partitions stay where the last dense read found them: the changed-sets
        are decoded per partition once per log position (:class:`DenseChanges`);
        a partition that moved is read again whole (``live_dense.lua``, a second
        round trip for the partitions that moved). :meth:`rank_and_distinct`
        reads the stamp with a player's rank instead."""
        for _ in range(ATTEMPTS):
            stamp, _ = await self.stamp()
            counted = await self._above_at(board, score, stamp)
            if counted is not None:
                return counted
        raise NotExact("a rebase is in progress")

    async def _above_at(
        self, board: str, score: int, stamp: tuple[int, ...]
    ) -> dict[str, Any] | None:
        """:meth:`above` for the partitions as ``stamp`` found them (the parts of
        partitions that moved since they were decoded are read again: one round
        trip); None when one was rebased since the stamp. ``asOf`` names the
        positions the parts were read at (a part read again may be newer than the
        stamp: the caller compares)."""
        parts = self.partitions
        bases = [int(b) for b in stamp[:parts]]
        positions = [int(x) for x in stamp[parts : 2 * parts]]
        base = await self._base(bases, board)
        self._last_bases = bases
        key = (bases[0], int(stamp[-2]), int(stamp[-1]))
        changes = self._dense_changes(board, key, parts)
        if not await self._refresh_dense(board, base, changes, positions):
            return None  # rebased since the stamp
        as_of, counts = changes.counts(base.segment)
        segment = base.segment
        distinct = segment.distinct_above(score) if segment is not None else 0
        return {
            "above": base.count_above(score)
            - counts.above(counts.removed, score)
            + counts.above(counts.live, score),
            "distinct": distinct
            - counts.above(counts.gone, score)
            + counts.above(counts.added, score),
            "asOf": {str(p): x for p, x in enumerate(as_of)},
            "generation": base.generation.id if base.generation else None,
        }

    async def rank_and_distinct(self, board: str, player_id: str) -> dict[str, Any]:
        """:meth:`rank`, with ``distinct``: the distinct live scores strictly above
        the player's (its dense rank less one) as of the rank's ``asOf``, or None
        when the board moved between the rank's counts and what ``distinct`` was
        counted from (the caller counts again, :meth:`above`).

        One round trip while the board's partitions stay where the last dense read
        found them: the stamp (what :class:`DenseChanges` are kept for) rides with
        the rank's counts, and must name the bases and positions the counts were
        read at; a partition that moved is read again (a second round trip), and
        must still be where the counts found it."""
        parts = self.partitions
        if is_cluster(self.speed.client):
            calls, script = self._stamp_calls([])
            me = await self.rank(
                board, player_id, lambda *_: calls, extra_scripts=(script,)
            )
            stamp, _ = await self._stamp_of(me.pop("extra"), 0)
        else:
            # One server: the stamp's bases and positions are the ones the counts
            # were read at (the rank checked them), so only the flags versions and
            # the epoch are read with them, by one MGET: read_stamp.lua read the
            # bases and positions again (25 calls inside a script per dense rank,
            # issue 27). Read after the counts, as read_stamp.lua was.
            flags_and_epoch = self._flags_and_epoch_command()
            me = await self.rank(board, player_id, lambda *_: [flags_and_epoch])
            (values,) = me.pop("extra")
            base_read: Base = me["base"]
            number = base_read.generation.number if base_read.generation else 0
            stamp = (
                *(number for _ in range(parts)),
                *(int(me["asOf"][str(p)]) for p in range(parts)),
                sum(int(v or 0) for v in values[:-1]),
                await self._epoch(values[-1]),
            )
        base: Base = me["base"]
        number = base.generation.number if base.generation is not None else 0
        distinct: int | None = None
        as_of = {str(p): int(x) for p, x in enumerate(stamp[parts : 2 * parts])}
        if all(int(b) == number for b in stamp[:parts]) and as_of == me["asOf"]:
            counted = await self._above_at(board, me["score"], stamp)
            if counted is not None and counted["asOf"] == me["asOf"]:
                distinct = counted["distinct"]
        return {**me, "distinct": distinct}

    async def _refresh_dense(
        self,
        board: str,
        base: Base,
        changes: DenseChanges,
        positions: list[int],
    ) -> bool:
        """Read the parts of ``changes`` that are not at ``positions`` again, once
        (a part read again may be newer than ``positions``: the callers compare
        ``asOf``); False when a partition was rebased since.

        While another read whole of the board is in flight in this worker, wait
        for it first, and read only what it left older than ``positions``: a read
        whole costs Redis time in proportion to the changes (about a second at
        1 M changed players), and a burst of cold dense reads, each reading every
        changed-set whole, blocked Redis for every client at the seeds' scale
        (bench/RESULTS.md, "Reads at the seeds' scale")."""
        stale = changes.stale(positions)
        pending = self._dense_reading.get(board)
        if stale and pending is not None:
            await asyncio.shield(pending)
            stale = [
                p
                for p in stale
                if (part := changes.parts[p]) is None or part.position < positions[p]
            ]
        if not stale:
            return True
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        mine = self._dense_reading.setdefault(board, done) is done
        try:
            decoded = await self._dense_parts(board, base, stale)
            if decoded is None:
                return False
            for p, part in zip(stale, decoded, strict=True):
                changes.parts[p] = part
            return True
        finally:
            if mine:
                del self._dense_reading[board]
            done.set_result(None)

    def _dense_changes(
        self, board: str, key: tuple[int, int, int], partitions: int
    ) -> DenseChanges:
        """The board's :class:`DenseChanges` for ``key`` (base generation, flags
        version, epoch): kept while the key holds, a fresh one otherwise."""
        dense = self._dense
        changes = dense.get(board)
        if changes is None or changes.key != key:
            changes = dense[board] = DenseChanges(key, partitions)
        dense.move_to_end(board)
        while len(dense) > DENSE_BOARDS:
            dense.popitem(last=False)
        return changes

    async def _read_whole(self, board: str, partitions: list[int]) -> list[list[Any]]:
        """``live_dense.lua``'s replies for ``partitions`` of ``board``: each
        changed-set read whole with its stamp, in one round trip."""
        keys = self._keys_of(board)[1]
        commands = self._script_calls(
            self._dense_script.sha,
            [keys[p] for p in partitions],
            (),
            [()] * len(partitions),
            epoch_key=True,
        )
        return _parts(
            await run_commands(self.speed.client, self._dense_script, commands)
        )

    async def _dense_parts(
        self, board: str, base: Base, partitions: list[int]
    ) -> list[DensePart] | None:
        """The changed-sets of ``partitions``, read whole (one round trip) and
        decoded against ``base``; None when a partition was rebased since."""
        replies = await self._read_whole(board, partitions)
        held = self._held.get(board) if self.fused else None
        if held is not None:
            # What a live rank counts in while the stamps hold (HeldPart).
            for p, reply in zip(partitions, replies, strict=True):
                self._admit(held, p, held_part(reply))
        if not _based_on(replies, base):
            return None
        segment = base.segment
        rows = base.partition_rows(self.partitions)
        out: list[DensePart] = []
        empty = np.zeros(0, np.int64)
        for p, reply in zip(partitions, replies, strict=True):
            members = reply[2]
            live = empty
            if members:
                encoded = np.frombuffer(
                    b"".join(bytes(m)[:8] for m in members), dtype=">u8"
                )
                live = SCORE_OFFSET - encoded.astype(np.int64)
            removed = empty
            bitmap = reply[3]
            if bitmap and segment is not None and rows is not None:
                own = rows.rows[p]
                bits = np.unpackbits(np.frombuffer(bytes(bitmap), dtype=np.uint8))
                local = np.flatnonzero(bits[: len(own)])
                removed = segment.scores[own[local]].astype(np.int64)
            out.append(DensePart(reply[1], removed, live))
        return out

    async def _bases(self) -> list[int]:
        pipe = self.speed.client.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.hget(Keys(p).base_generation, "g")
        return [_int(v) if v is not None else 0 for v in await pipe.execute()]

    async def nearby(self, board: str, player_id: str, radius: int) -> dict[str, Any]:
        """Exact live entries within ``radius`` positions of the player."""
        margin0 = radius + 16

        def bounds(row: int, base: Base, margin: int) -> tuple[int, int]:
            """Base rows [lo, hi) around ``row`` (the standing's base row)."""
            return max(0, row - margin), min(base.population, row + margin + 1)

        def window_of(
            score: int, achieved: int | None, base: Base, row: int, margin: int
        ) -> list[tuple[Any, ...]]:
            center = b"(" + encode_entry(score, player_id, achieved)
            lo, hi = bounds(row, base, margin)
            # One entry more before the window: whether the entry just above it
            # ties with its first score, i.e. whether that score's rank needs a count.
            window = Window(center, radius, center, radius + 1, lo, hi)
            return self._window_commands(board, window, base)

        def tied_top(score: int, base: Base, row: int) -> int | None:
            """The window's first score as the base alone places it, when the row
            above it ties with it (its rank then needs a count): a guess, so that
            the count rides with the rank's round trip instead of a second one."""
            top = row - radius
            segment = base.segment
            if unique or segment is None or top < 1 or top >= base.population:
                return None
            first = int(segment.scores[top])
            if first == score or int(segment.scores[top - 1]) != first:
                return None
            return first

        unique = self._order(board)[1]
        # The window's first score as the last attempt found it: its count goes in
        # the rank's round trip too, so that a stream of writes between two round
        # trips cannot keep the answer from settling (issue 23).
        top_guess: int | None = None
        for attempt in range(NEARBY_ATTEMPTS):
            if attempt:
                pause = min(NEARBY_JITTER_S * 2 ** (attempt - 1), NEARBY_JITTER_MAX_S)
                await asyncio.sleep(random.random() * pause)
            # The window around the standing the rank assumes, and the counts
            # above the window's guessed first score (guessed from the base on
            # the first attempt), are read with the rank's counts, in the same
            # script call (live_nearby.lua: each partition's base and position
            # read once): when that standing holds, no second trip is needed.
            chosen: list[int | None] = [top_guess]

            def around_of(
                score: int,
                base: Base,
                row: int,
                top_guess: int | None = top_guess,
                chosen: list[int | None] = chosen,
            ) -> Around:
                guess = top_guess
                if guess is None:
                    guess = tied_top(score, base, row)
                chosen[0] = guess
                lo, hi = bounds(row, base, margin0)
                # The changed players read go no further than the base rows the
                # window reads, lo and hi - 1 (inclusive): a window settled from
                # those rows (_window_around) has at least radius + 1 unchanged
                # rows of [lo, row) before the entry and radius of [row, hi) after
                # it, so no player past them is in it; when it is not settled, a
                # wider one is read by live_window.lua, unbounded. Fewer members
                # read: 5 + 6 per partition cost half a nearby's Redis CPU
                # (issue 26).
                return Around(
                    radius,
                    radius + 1,
                    lo,
                    hi,
                    guess,
                    b"[" + base.encoded(hi - 1) if hi < base.population else "+",
                    b"[" + base.encoded(lo) if lo > 0 else "-",
                )

            try:
                me = await self.rank(board, player_id, around_for=around_of)
            except NotExact:
                continue  # the player's score kept changing: a spoilt attempt
            guessed = chosen[0]
            base: Base = me["base"]
            me.pop("extra")
            read = me.pop("around")
            first_window = [[r[i] for i in WINDOW_OF_NEARBY] for r in read]
            # The guessed score's counts, as live_counts.lua's first fields.
            guessed_counts = [[r[i] for i in TOP_OF_NEARBY] for r in read]
            score, position = me["score"], me["position"]
            achieved, row = me["achieved"], me["base_row"]
            timed, unique = self._order(board)
            center = encode_entry(score, player_id, achieved)
            margin = margin0
            for _ in range(ATTEMPTS * 2):
                lo, hi = bounds(row, base, margin)
                if margin == margin0:
                    replies = first_window
                else:
                    replies = _parts(
                        await run_commands(
                            self.speed.client,
                            self._window_script,
                            window_of(score, achieved, base, row, margin),
                        )
                    )
                changed = self._window_changed(replies, base)
                as_of = _as_of(replies)
                if as_of != me["asOf"] or not _based_on(replies, base):
                    break  # something changed since the rank: start over
                # Only the unchanged base rows the window can use are encoded:
                # the radius + 1 nearest before the standing's base row (rows
                # before it sort before the player's entry) and the radius + 1
                # from it on (one may be the player's own row); a side with fewer
                # in [lo, hi) passes them all, so _window_around decides as with
                # every row of the range (encoding them was 4 % of a live
                # nearby's API CPU, py-spy, session 16).
                above = _unchanged(
                    range(min(row, hi) - 1, lo - 1, -1), changed, radius + 1
                )
                below = _unchanged(range(max(row, lo), hi), changed, radius + 1)
                first = above[-1] if above else max(row, lo)
                stop = below[-1] + 1 if below else max(row, lo)
                snap_rows = [
                    m
                    for r, m in enumerate(base.encoded_range(first, stop), start=first)
                    if r not in changed
                ]
                around = _window_around(
                    snap_rows, replies, center, radius, lo > 0, hi < base.population
                )
                if around is None:
                    margin *= 4
                    continue
                window, before, previous_entry = around
                first_position = position - before
                top_score = decode_entry(window[0], timed)[0]
                # The entry just above the window (none: the window starts at the top).
                previous = (
                    None
                    if previous_entry is None
                    else decode_entry(previous_entry, timed)[0]
                )
                first_rank = await self._first_rank(
                    board,
                    me,
                    top_score,
                    previous,
                    first_position,
                    unique,
                    guessed,
                    guessed_counts,
                )
                if first_rank is None:
                    top_guess = top_score
                    break
                entries = _ranked(window, first_position, first_rank, timed, unique)
                return {**me, "entries": entries}
        raise NotExact("the board kept changing around the player")

    async def _first_rank(
        self,
        board: str,
        me: dict[str, Any],
        top_score: int,
        previous: int | None,
        first_position: int,
        unique: bool,
        guessed: int | None,
        guessed_counts: list[list[Any]],
    ) -> int | None:
        """The rank of a nearby window's first score ``top_score`` (``previous``:
        the score just above the window, None at the top). Everything above it is
        outside the window: its rank needs one count, read with the same positions
        as the rest (``guessed_counts`` when read with the rank for ``guessed``),
        unless no entry above the window ties with it. None when that count was
        read at other positions than the player's rank (start over)."""
        score = me["score"]
        if unique or (
            top_score != score and (previous is None or previous != top_score)
        ):
            return first_position
        if top_score == score:
            return int(me["rank"])
        base: Base = me["base"]
        if guessed == top_score:
            counted = self._counted_above(top_score, base, guessed_counts)
        else:
            counted = await self._count_above(board, top_score, base)
        if counted["asOf"] != me["asOf"]:
            return None
        return int(counted["above"]) + 1

    async def _count_above(self, board: str, score: int, base: Base) -> dict[str, Any]:
        above = base.count_above(score)
        replies, _, _ = await self._counts_round(
            board, encode_score(score), encode_score(score), None, base, above, above
        )
        return self._counted_above(score, base, replies)

    @staticmethod
    def _counted_above(
        score: int, base: Base, replies: list[list[Any]]
    ) -> dict[str, Any]:
        """Entries above ``score`` from ``live_counts.lua`` replies read for it."""
        above = base.count_above(score)
        return {
            "above": above + sum(r[2] - r[3] for r in replies),
            # A rebase since moves no position but changes the base: start over.
            "asOf": _as_of(replies) if _based_on(replies, base) else None,
        }

    # ------------------------------------- what cached answers depend on; approx

    def _stamp_commands_of(self) -> list[tuple[Any, ...]]:
        """On a cluster: the epoch and ``live_stamp.lua`` once per partition (a
        call's keys must share a slot there)."""
        if self._stamp_commands is None:
            script = self._stamp_script
            self._stamp_commands = [("GET", EPOCH_KEY)]
            for p in range(self.partitions):
                keys = LIVE_STAMP.keys_of({}, [_stamp_keys(Keys(p))])
                self._stamp_commands.append(("EVALSHA", script.sha, len(keys), *keys))
        return self._stamp_commands

    async def stamp(
        self, fields: list[tuple[str, str]] | None = None
    ) -> tuple[tuple[int, ...], list[Any]]:
        """What a live answer depends on, in one round trip: every partition's base
        generation and log position, the flags version (the sum of the partitions'
        counters, moved by ``flag_player.lua`` itself), and the dataset's epoch (a
        random number kept in Redis: a flushed or replaced dataset whose positions
        restart cannot match an answer cached from the old one). As (bases...,
        positions..., flags, epoch), with the values of the hash ``fields``
        ((key, field) pairs, e.g. :meth:`standing_fields`) read in the same round
        trip. On one server it is one reply (``read_stamp.lua``); on a cluster one
        per partition and counter."""
        fields = fields or []
        commands, script = self._stamp_calls(fields)
        replies = await run_commands(self.speed.client, script, commands)
        return await self._stamp_of(replies, len(fields))

    def _stamp_calls(
        self, fields: list[tuple[str, str]]
    ) -> tuple[list[tuple[Any, ...]], Any]:
        """The commands of :meth:`stamp` (to send alone or with others), and the
        script they call."""
        partitions = self.partitions
        if is_cluster(self.speed.client):
            commands = self._stamp_commands_of() + [
                ("HGET", key, field) for key, field in fields
            ]
            return commands, self._stamp_script
        if self._read_stamp_keys is None:
            self._read_stamp_keys = READ_STAMP.keys_of(
                {"epoch": EPOCH_KEY},
                [_stamp_keys(Keys(p)) for p in range(partitions)],
            )
        keys = [*self._read_stamp_keys, *(key for key, _ in fields)]
        args = READ_STAMP.args_of(
            {"partitions": partitions}, rest=[field for _, field in fields]
        )
        script = self._read_stamp_script
        return [("EVALSHA", script.sha, len(keys), *keys, *args)], script

    async def _stamp_of(
        self, replies: list[Any], fields: int
    ) -> tuple[tuple[int, ...], list[Any]]:
        """:meth:`stamp` from the replies of :meth:`_stamp_calls` (``fields``: how
        many hash fields they read); an epoch not set yet is set here."""
        partitions = self.partitions
        client = self.speed.client
        if is_cluster(client):
            n = len(replies) - fields
            triples = [v for reply in replies[1:n] for v in reply]
            flat = [v for i, v in enumerate(triples) if i % 3 != 2]
            flags_total = sum(int(v or 0) for v in triples[2::3])
            head, values = [flags_total, replies[0]], replies[n:]
        else:
            (reply,) = replies
            head = reply[:2]
            flat = reply[2 : 2 + 2 * partitions]
            values = reply[2 + 2 * partitions :]
        flags = int(head[0] or 0)
        epoch = await self._epoch(head[1])
        stamp = (*flat[0::2], *flat[1::2], flags, epoch)
        return stamp, values

    async def _epoch(self, raw: Any) -> int:
        """The dataset's epoch as read (``raw``), set here when not set yet."""
        epoch = int(raw or 0)
        if epoch == 0:
            client = self.speed.client
            await client.set(EPOCH_KEY, secrets.randbits(62) + 1, nx=True)
            epoch = int(await client.get(EPOCH_KEY) or 0)
        return epoch

    def _flags_and_epoch_command(self) -> tuple[Any, ...]:
        """One server: an MGET of every partition's flags version and the epoch
        (what a stamp holds besides the bases and positions)."""
        if self._flags_and_epoch is None:
            self._flags_and_epoch = (
                "MGET",
                *(Keys(p).flags_version for p in range(self.partitions)),
                EPOCH_KEY,
            )
        return self._flags_and_epoch

    def standing_fields(self, board: str, player_id: str) -> list[tuple[str, str]]:
        """(key, field) of the player's live total on the board and of its flag,
        for :meth:`stamp`."""
        owner = Keys(partition_of(player_id, self.partitions))
        return [(owner.totals(board), player_id), (owner.flags, player_id)]

    async def histogram_tables(self, board: str) -> list[Any]:
        """The flags version (summed over the partitions' replies, each read with
        its tree), the epoch (read first, as :meth:`stamp` orders it), then every
        partition's ``approx_table.lua`` reply for the board: one round trip."""
        script = self._approx_table
        commands: list[tuple[Any, ...]] = [("GET", EPOCH_KEY)]
        for p in range(self.partitions):
            keys = Keys(p)
            script_keys = APPROX_TABLE.keys_of(
                {
                    "fw": keys.fenwick(board),
                    "base": keys.base_generation,
                    "position": keys.position,
                    "flags_version": keys.flags_version,
                }
            )
            commands.append(("EVALSHA", script.sha, len(script_keys), *script_keys))
        replies = await run_commands(self.speed.client, script, commands)
        tables = replies[1:]
        return [sum(_int(t[3]) for t in tables), replies[0], *tables]

    async def approx_counts(
        self, board: str, player_id: str, args: list[Any]
    ) -> list[Any]:
        """The player's live total and flag, then every partition's
        ``approx_rank.lua`` reply for ``args`` (APPROX_RANK.args_of): one round
        trip."""
        owner = Keys(partition_of(player_id, self.partitions))
        script = self._approx
        commands: list[tuple[Any, ...]] = [
            ("HGET", owner.totals(board), player_id),
            ("HGET", owner.flags, player_id),
        ]
        for p in range(self.partitions):
            keys = Keys(p)
            script_keys = APPROX_RANK.keys_of(
                {
                    "fw": keys.fenwick(board),
                    "bk": keys.buckets(board),
                    "base": keys.base_generation,
                    "position": keys.position,
                }
            )
            commands.append(
                ("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
            )
        return await run_commands(self.speed.client, script, commands)


def _stamp_keys(keys: Keys) -> dict[str, str]:
    """A partition's keys in ``live_stamp.lua`` / ``read_stamp.lua``."""
    return {
        "base": keys.base_generation,
        "position": keys.position,
        "flags_version": keys.flags_version,
    }


def _unchanged(rows: Any, changed: set[int], count: int) -> list[int]:
    """The first ``count`` of ``rows`` (in their order) not in ``changed``."""
    out: list[int] = []
    for r in rows:
        if r not in changed:
            out.append(r)
            if len(out) == count:
                break
    return out


def _window_around(
    snap_rows: list[bytes],
    replies: list[list[Any]],
    center: bytes,
    radius: int,
    rows_before: bool,
    rows_after: bool,
) -> tuple[list[bytes], int, bytes | None] | None:
    """The nearby window around the player's entry ``center``: the base rows read
    (``snap_rows``, unchanged players only) merged with the changed players the
    ``live_window.lua`` replies return, as (window, entries before the player,
    the entry just above the window or None at the top). None when the base rows
    read are too few on a side that has more (``rows_before``/``rows_after``):
    read a wider range."""
    after_snap = [m for m in snap_rows if m > center]
    before_snap = [m for m in snap_rows if m < center]
    if (len(after_snap) < radius and rows_after) or (
        len(before_snap) < radius + 1 and rows_before
    ):
        return None
    after = sorted(after_snap + [m for r in replies for m in r[4]])[:radius]
    above_window = sorted(before_snap + [m for r in replies for m in r[5]])[
        -(radius + 1) :
    ]
    before = above_window[len(above_window) > radius :]
    if radius == 0:
        before, after = [], []
    previous = above_window[0] if len(above_window) > radius else None
    return [*before, center, *after], len(before), previous


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
