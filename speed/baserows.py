"""Partition-local rows of a base generation: what the snapshot side of a changed-set
names.

A board's changed-set has two sides (DESIGN.md "Live = generation + deltas"): the
live totals of the players changed since the partition's base generation (``chz``, a
lex zset) and *which base rows those players had* (``chb``). A base row is fixed for
the whole generation, so the snapshot side needs no score and no player id: it is a
bitmap over the partition's rows of the base segment, bit ``L`` set when the
partition's ``L``-th player in display order is changed (or shadowed). About one bit
per base player of the partition, against ~127 B per member for a zset.

Local row ``L`` of partition ``p`` is the index of a global display row among the
rows whose player belongs to ``p`` (``crc32(playerId) mod P``), in display order, so
"changed players whose snapshot score is above s" is a prefix count of the bitmap
(``BITCOUNT ... BIT``) up to the number of ``p``'s rows above ``s``.

The mapping is derived once per (generation, board, P) and kept with the generation
(:attr:`serving.registry.Generation.memo`): the generation is immutable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from serving.registry import Generation, GenerationRegistry
from serving.segments import BoardSegment


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (0xEDB88320 ^ (c >> 1)) if c & 1 else c >> 1
        table[n] = c
    return table


_CRC_TABLE = _crc_table()


# Rows per vector step of the whole-segment derivations below: their temporaries
# are a few arrays of this many int64s (32 MiB), whatever the board's size; at the
# seeds' 100 M players per board, whole-column temporaries took tens of GiB.
CHUNK_ROWS = 1 << 22


def crc32_column(offsets: np.ndarray, data: bytes | memoryview) -> np.ndarray:
    """zlib.crc32 of every string of an Arrow-style (offsets, data) column, one
    vector step per byte position (over CHUNK_ROWS strings at a time) instead of
    one Python call per string."""
    raw = np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(0, np.uint8)
    count = len(offsets) - 1
    crc = np.empty(max(0, count), dtype=np.uint32)
    for begin in range(0, count, CHUNK_ROWS):
        end = min(count, begin + CHUNK_ROWS)
        crc[begin:end] = _crc32_chunk(offsets[begin : end + 1], raw)
    return crc


def _crc32_chunk(offsets: np.ndarray, raw: np.ndarray) -> np.ndarray:
    starts = offsets[:-1].astype(np.int64)
    lengths = offsets[1:].astype(np.int64) - starts
    crc = np.full(len(starts), 0xFFFFFFFF, dtype=np.uint32)
    if len(starts) == 0:
        return crc
    # Longest strings first: step j then works on a prefix of the order.
    order = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[order]
    sorted_starts = starts[order]
    work = crc[order]
    negated = -sorted_lengths
    longest = int(sorted_lengths[0])
    for j in range(longest):
        # Strings longer than j: indices [0, active) of the order.
        active = int(np.searchsorted(negated, -j, side="left"))
        if active == 0:
            break
        byte = raw[sorted_starts[:active] + j].astype(np.uint32)
        head = work[:active]
        work[:active] = _CRC_TABLE[(head ^ byte) & 0xFF] ^ (head >> np.uint32(8))
    crc[order] = work
    return crc ^ np.uint32(0xFFFFFFFF)


@dataclass(frozen=True)
class PartitionRows:
    """Global display rows of a base segment, split by owning partition."""

    partitions: int
    # Per global row: its partition, and its index among that partition's rows.
    owner: np.ndarray
    local: np.ndarray
    # Per partition: its global rows, ascending (display order).
    rows: tuple[np.ndarray, ...]
    # Player ids in id order (the segment's index), NUL-padded to one width, and
    # their rows: a batch of ids is looked up with one searchsorted (ids never hold
    # NUL, speed/events.py, so padding cannot make two ids equal).
    sorted_ids: np.ndarray
    id_rows: np.ndarray

    def local_row(self, row: int) -> int:
        return int(self.local[row])

    def count_before(self, partition: int, row: int) -> int:
        """How many of the partition's rows come before global row ``row`` (its
        local bound for "rows above" and "rows before" counts)."""
        return int(np.searchsorted(self.rows[partition], row, side="left"))

    def global_row(self, partition: int, local: int) -> int:
        return int(self.rows[partition][local])

    def local_rows_of(self, players: list[str]) -> list[int]:
        """Local row of each player, -1 for a player not in the segment."""
        local = self.local
        return [-1 if row < 0 else int(local[row]) for row in self.rows_of(players)]

    def rows_of(self, players: list[str]) -> list[int]:
        """Global display row of each player, -1 for a player not in the segment."""
        if not players:
            return []
        if len(self.sorted_ids) == 0:
            return [-1] * len(players)
        width = self.sorted_ids.dtype.itemsize
        raw = [p.encode("utf-8") for p in players]
        keys = np.array(raw, dtype=self.sorted_ids.dtype)
        at = np.searchsorted(self.sorted_ids, keys, side="left")
        out: list[int] = []
        for key, pos in zip(raw, at.tolist(), strict=True):
            if (
                len(key) <= width
                and pos < len(self.sorted_ids)
                and self.sorted_ids[pos] == key
            ):
                out.append(int(self.id_rows[pos]))
            else:
                out.append(-1)
        return out


def build_partition_rows(segment: BoardSegment, partitions: int) -> PartitionRows:
    players = segment.players
    # The narrowest types that hold them: at 100 M players per board a worker
    # keeps these for every board of a base generation (int64 throughout was 24 B
    # per player, against 7-10 now).
    crc = crc32_column(players.offsets, players.data)
    owner = (crc % np.uint32(partitions)).astype(
        np.min_scalar_type(max(0, partitions - 1))
    )
    del crc
    count = len(owner)
    row_type = np.int32 if count < 2**31 else np.int64
    local = np.empty(count, dtype=row_type)
    rows = []
    # One pass per partition (a stable argsort of the owners kept an int64 order
    # of the whole board, and its temporaries several more).
    for p in range(partitions):
        own = np.flatnonzero(owner == p).astype(row_type)
        local[own] = np.arange(len(own), dtype=row_type)
        rows.append(own)
    return PartitionRows(
        partitions, owner, local, tuple(rows), _padded_ids(segment), segment.index
    )


def _padded_ids(segment: BoardSegment) -> np.ndarray:
    """The segment's ids in index (id) order as one fixed-width bytes array, built
    CHUNK_ROWS ids at a time (one gather per byte position)."""
    players = segment.players
    offsets = players.offsets
    count = len(offsets) - 1
    if count == 0:
        return np.zeros(0, dtype="S1")
    width = max(1, int(np.max(np.diff(offsets))))
    raw = np.frombuffer(players.data, dtype=np.uint8)
    out = np.zeros((count, width), dtype=np.uint8)
    index = segment.index
    for begin in range(0, count, CHUNK_ROWS):
        end = min(count, begin + CHUNK_ROWS)
        rows = np.asarray(index[begin:end], dtype=np.int64)
        starts = offsets[rows].astype(np.int64)
        lengths = offsets[rows + 1].astype(np.int64) - starts
        block = out[begin:end]
        for j in range(int(lengths.max(initial=0))):
            longer = lengths > j
            block[longer, j] = raw[starts[longer] + j]
    return out.view(f"S{width}").ravel()


def partition_rows(
    generation: Generation, board: str, partitions: int
) -> PartitionRows | None:
    """The board's partition rows in ``generation`` (None when the board is not in
    it), derived once and kept with the generation."""
    segment = generation.board(board)
    if segment is None:
        return None
    return generation.derive(
        partition_rows_key(board, partitions),
        lambda: build_partition_rows(segment, partitions),
    )


async def derive_partition_rows(
    generation: Generation, boards: Iterable[str], partitions: int
) -> None:
    """The partition rows of ``boards`` in ``generation``, those not derived yet
    derived in a worker thread. Deriving a board's costs about 0.25 s per million
    players (a crc32 of every id): on the event loop, the first live read or write
    of a board of 100 M players stalled every other request of the worker, snapshot
    reads included, for 23-27 s (bench/RESULTS.md, "Reads at the seeds' scale")."""
    memo = generation.memo
    missing = [b for b in boards if partition_rows_key(b, partitions) not in memo]
    if not missing:
        return

    def derive() -> None:
        for board in missing:
            partition_rows(generation, board, partitions)

    await asyncio.to_thread(derive)


def partition_rows_key(board: str, partitions: int) -> str:
    """Where :func:`partition_rows` keeps a board's rows in ``Generation.memo``."""
    return f"speed.baserows:{board}:{partitions}"


def base_row(
    generation: Generation | None, board: str, partitions: int, player_id: str
) -> tuple[int, int, int | None] | None:
    """(local row, score, achievedMs) of a player in its partition's base segment of
    ``board``; None when the player is not on it."""
    if generation is None:
        return None
    segment = generation.board(board)
    if segment is None:
        return None
    row = segment.row_of(player_id)
    if row is None:
        return None
    rows = partition_rows(generation, board, partitions)
    assert rows is not None
    achieved = segment.achieved
    return (
        rows.local_row(row),
        int(segment.scores[row]),
        None if achieved is None else int(achieved[row]),
    )


def base_version(
    generation: Generation | None, board: str, player_id: str
) -> int | None:
    """The pair's version in the base segment of ``board``; None when the player is
    not on it or the segment carries no versions."""
    segment = generation.board(board) if generation is not None else None
    if segment is None:
        return None
    row = segment.row_of(player_id)
    return None if row is None else segment.version_at(row)


def local_rows(
    generation: Generation | None, board: str, partitions: int, players: list[str]
) -> list[int]:
    """Local rows of many players in the base segment of ``board`` (-1: not in it)."""
    if generation is None:
        return [-1] * len(players)
    rows = partition_rows(generation, board, partitions)
    if rows is None:
        return [-1] * len(players)
    return rows.local_rows_of(players)


def base_entries(
    generation: Generation | None, board: str, partitions: int, players: list[str]
) -> list[tuple[int, str]]:
    """Per player: (local row, base) in the base segment of ``board``; the base is
    ``"<score>,<version>[,<achievedMs>]"`` (what the owner transaction starts from
    when Redis holds no state for the pair: the player has not changed since the
    generation), ``""`` for a player not in it or a segment without versions."""
    if generation is None:
        return [(-1, "")] * len(players)
    rows = partition_rows(generation, board, partitions)
    segment = generation.board(board)
    if rows is None or segment is None:
        return [(-1, "")] * len(players)
    scores, versions, achieved = segment.scores, segment.versions, segment.achieved
    out: list[tuple[int, str]] = []
    for row in rows.rows_of(players):
        if row < 0:
            out.append((-1, ""))
            continue
        local = int(rows.local[row])
        if versions is None:
            out.append((local, ""))
        elif achieved is None:
            out.append((local, f"{int(scores[row])},{int(versions[row])}"))
        else:
            out.append(
                (
                    local,
                    f"{int(scores[row])},{int(versions[row])},{int(achieved[row])}",
                )
            )
    return out


def registry_lookup(
    registry: GenerationRegistry,
) -> Callable[[int], Generation | None]:
    """Generation number -> mapped generation, refreshing once when not found (a
    rebase can switch a partition to a generation this process has not seen)."""

    def lookup(number: int) -> Generation | None:
        generation = registry.by_number(number)
        if generation is None:
            registry.refresh(force=True)
            generation = registry.by_number(number)
        return generation

    return lookup
