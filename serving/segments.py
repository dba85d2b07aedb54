"""Serving segments: one board of one generation, written by the batch layer and
memory-mapped by readers.

Files per board (named after the board id; ':' is fine on Linux), each an Arrow IPC
file of one uncompressed record batch (:func:`serving.files.write_arrow`):

* ``<board>.arrow``: ``player_id`` (utf8), ``score`` (int64) and, on
  ``first_achieved`` boards, ``achieved_ms`` (int64), then (when the publish gives
  it) ``version`` (int64: the last version the speed layer's log gave the pair up
  to the generation's boundary, so a player unchanged since needs no state in
  Redis to keep counting) in display order (row i is position i+1);
* ``<board>.index.arrow``: ``row`` (uint32), row numbers sorted by player id (UTF-8
  byte order), for bisecting by player;
* ``<board>.buckets.arrow``: equi-depth Fenwick buckets, ascending: ``lower`` (int64,
  distinct scores; a bucket holds ``lower <= s < next lower``; the first is the
  board's minimum) and ``count`` (int64 players);
* ``<board>.hidden.arrow`` (optional): shadowed players left off the board,
  ``player_id``, ``score``, sorted by player id, so their own reads still answer;
* ``<board>.versions.arrow`` (optional, batch-only): the pairs the log named on the
  board up to the boundary that ``<board>.arrow`` does not hold (hidden players,
  matches corrected away, held records, totals that vanished), ``player_id``,
  ``version`` (> 0), sorted by player id; listed in the manifest's top-level
  ``versions`` map (a board may have one without a segment). With the segment's
  ``version`` column they give every named pair's version at the boundary, which
  the next incremental build starts from (jobs/versions.py).

The same rows give byte-identical files. Every lookup is a binary search over the
mapped columns: O(log n), no network hop.
"""

from __future__ import annotations

import bisect
import operator
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serving.files import read_arrow, write_arrow

SEGMENT_SCHEMA = pa.schema([("player_id", pa.string()), ("score", pa.int64())])
# first_achieved boards add when each player reached its score (epoch ms).
TIMED_SEGMENT_SCHEMA = SEGMENT_SCHEMA.append(pa.field("achieved_ms", pa.int64()))
INDEX_SCHEMA = pa.schema([("row", pa.uint32())])
BUCKETS_SCHEMA = pa.schema([("lower", pa.int64()), ("count", pa.int64())])
# The pair's version at the boundary (optional: segments written before it lack it).
VERSION_FIELD = pa.field("version", pa.int64())
HIDDEN_SCHEMA = pa.schema([("player_id", pa.string()), ("score", pa.int64())])
VERSIONS_SCHEMA = pa.schema([("player_id", pa.string()), VERSION_FIELD])


def segment_file(board: str) -> str:
    return f"{board}.arrow"


def index_file(board: str) -> str:
    return f"{board}.index.arrow"


def buckets_file_name(board: str) -> str:
    return f"{board}.buckets.arrow"


def hidden_file(board: str) -> str:
    return f"{board}.hidden.arrow"


def versions_file(board: str) -> str:
    return f"{board}.versions.arrow"


# ------------------------------------------------------------------------- writer


def equi_depth_buckets(
    scores: np.ndarray, target: int
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, count) of buckets over ``scores``, ascending by lower.

    Greedy over distinct scores in ascending order: a bucket closes once it holds at
    least ``target`` players; a boundary is always a distinct score, so one score
    with many ties makes a bucket larger than the target.
    """
    if len(scores) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    values, counts = np.unique(scores, return_counts=True)
    lowers: list[int] = []
    sizes: list[int] = []
    filled = target  # forces a bucket to open at the first value
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        if filled >= target:
            lowers.append(value)
            sizes.append(0)
            filled = 0
        sizes[-1] += count
        filled += count
    return np.asarray(lowers, np.int64), np.asarray(sizes, np.int64)


def canonical_array(array: pa.Array) -> pa.Array:
    """The same values in one canonical layout, so the same rows give the same bytes
    whatever produced the array (the IPC file stores buffers as they are): buffers
    cut to exactly the values (a slice or a kernel's output may carry more, e.g. a
    sliced string array's whole data buffer or an over-allocated one), offsets from
    0, no validity bitmap when nothing is null."""
    n = len(array)
    if array.null_count:
        return pa.array(array.to_pylist(), array.type)  # rare (timed boards only)
    buffers = array.buffers()
    if pa.types.is_string(array.type):
        offsets = np.frombuffer(buffers[1], np.int32, n + 1, array.offset * 4)
        first, last = int(offsets[0]), int(offsets[-1])
        exact = pa.py_buffer((offsets - first).astype(np.int32).tobytes())
        data = (
            buffers[2].slice(first, last - first) if buffers[2] else pa.py_buffer(b"")
        )
        return pa.Array.from_buffers(array.type, n, [None, exact, data], null_count=0)
    width = array.type.bit_width // 8
    values = buffers[1].slice(array.offset * width, n * width)
    return pa.Array.from_buffers(array.type, n, [None, values], null_count=0)


def write_board_segment(
    directory: Path,
    board: str,
    player_ids: pa.Array,
    scores: pa.Array,
    bucket_target: int,
    achieved: pa.Array | None = None,
    versions: pa.Array | None = None,
) -> dict[str, str]:
    """Write the three files of one board (rows in display order); returns file
    name -> sha256."""
    player_ids, scores = canonical_array(player_ids), canonical_array(scores)
    if achieved is None:
        data = pa.table([player_ids, scores], schema=SEGMENT_SCHEMA)
    else:
        data = pa.table(
            [player_ids, scores, canonical_array(achieved)],
            schema=TIMED_SEGMENT_SCHEMA,
        )
    if versions is not None:
        data = data.append_column(VERSION_FIELD, canonical_array(versions))
    index = pc.sort_indices(data, sort_keys=[("player_id", "ascending")])
    lowers, counts = equi_depth_buckets(
        data.column("score").to_numpy(zero_copy_only=False), bucket_target
    )
    files = {
        segment_file(board): data,
        index_file(board): pa.table([index.cast(pa.uint32())], schema=INDEX_SCHEMA),
        buckets_file_name(board): pa.table(
            [pa.array(lowers, pa.int64()), pa.array(counts, pa.int64())],
            schema=BUCKETS_SCHEMA,
        ),
    }
    return {name: write_arrow(directory / name, table) for name, table in files.items()}


def board_entry(board: str, population: int, sums: Mapping[str, str]) -> dict[str, Any]:
    """The manifest's entry for a board written by :func:`write_board_segment`
    (``checksums`` goes to the gold manifest row, not to ``manifest.json``)."""
    return {
        "population": population,
        "file": segment_file(board),
        "index": index_file(board),
        "buckets": buckets_file_name(board),
        "sha256": sums[segment_file(board)],
        "checksums": dict(sums),
    }


def board_spans(boards: pa.Array) -> list[tuple[str, int, int]]:
    """(board, first row, end) of each run of equal values in ``boards``: one per
    board when the rows are grouped by board. Found where the dictionary index
    changes, with no per-row Python work."""
    encoded = pc.dictionary_encode(boards)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    names = encoded.dictionary.to_pylist()
    starts = [0, *(np.flatnonzero(np.diff(codes)) + 1).tolist(), len(codes)]
    return [
        (names[codes[begin]], begin, end)
        for begin, end in zip(starts[:-1], starts[1:], strict=True)
        if end > begin
    ]


def write_segments(
    table: pa.Table,
    directory: Path,
    bucket_target: int,
    orders: Mapping[str, tuple[bool, bool]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Write every board of a table sorted by (board, position); returns the
    manifest's boards map.

    ``orders``: board -> (first_achieved, unique rank) for boards that are not the
    default (player_id ties, competition rank); they are named in the manifest."""
    orders = orders or {}
    boards: dict[str, dict[str, Any]] = {}
    if table.num_rows == 0:
        return boards
    # Rows are sorted by (board, position): each board is one contiguous run.
    players = table.column("player_id").combine_chunks()
    scores = table.column("score").combine_chunks().cast(pa.int64())
    achieved = (
        table.column("achieved_ms").combine_chunks().cast(pa.int64())
        if "achieved_ms" in table.column_names
        else None
    )
    # A pair the log never named (e.g. a replayed rule's board) is at version 0.
    versions = (
        table.column("version").combine_chunks().cast(pa.int64()).fill_null(0)
        if "version" in table.column_names
        else None
    )
    for board, begin, end in board_spans(table.column("board").combine_chunks()):
        timed, unique = orders.get(board, (False, False))
        sums = write_board_segment(
            directory,
            board,
            players.slice(begin, end - begin),
            scores.slice(begin, end - begin),
            bucket_target,
            achieved.slice(begin, end - begin)
            if timed and achieved is not None
            else None,
            None if versions is None else versions.slice(begin, end - begin),
        )
        boards[board] = board_entry(board, end - begin, sums)
        if timed:
            boards[board]["tieBreak"] = "first_achieved"
        if unique:
            boards[board]["rank"] = "unique"
    return boards


def write_hidden(
    rows: Iterable[tuple[str, str, int]],
    directory: Path,
    boards: dict[str, dict[str, Any]],
) -> None:
    """Write ``<board>.hidden.arrow`` per board from (board, player_id, score) rows
    and list it in ``boards`` (the manifest's map). A board whose players are all
    hidden gets an empty public segment so the side file has a home."""
    by_board: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for board, player, score in rows:
        by_board[board].append((player, score))
    for board, items in sorted(by_board.items()):
        items.sort(key=lambda item: item[0].encode("utf-8"))
        table = pa.table(
            [
                pa.array([p for p, _ in items], pa.string()),
                pa.array([s for _, s in items], pa.int64()),
            ],
            schema=HIDDEN_SCHEMA,
        )
        name = hidden_file(board)
        digest = write_arrow(directory / name, table)
        meta = boards.get(board)
        if meta is None:
            # Every player of the board is hidden: the public side is empty.
            sums = write_board_segment(
                directory, board, pa.array([], pa.string()), pa.array([], pa.int64()), 1
            )
            meta = boards[board] = board_entry(board, 0, sums)
        meta["hidden"] = name
        meta["checksums"][name] = digest


def write_versions(
    directory: Path, board: str, player_ids: pa.Array, versions: pa.Array
) -> tuple[str, str]:
    """Write ``<board>.versions.arrow`` from (player_id, version) pairs in any
    order (one per player); returns (file name, sha256)."""
    table = pa.table(
        [player_ids.cast(pa.string()), versions.cast(pa.int64())],
        schema=VERSIONS_SCHEMA,
    )
    table = table.take(pc.sort_indices(table, sort_keys=[("player_id", "ascending")]))
    table = pa.table(
        [canonical_array(c.combine_chunks()) for c in table.columns],
        schema=VERSIONS_SCHEMA,
    )
    name = versions_file(board)
    return name, write_arrow(directory / name, table)


def read_versions(path: Path) -> pa.Table:
    """A ``<board>.versions.arrow`` file (memory-mapped): player_id, version."""
    return read_arrow(path)


# ------------------------------------------------------------------------- reader


def optional_numpy(table: pa.Table, name: str) -> np.ndarray | None:
    """A column of a segment or layer file as numpy, None when the board has none
    (``achieved_ms`` on boards without ``first_achieved`` ties, ``version`` in
    files written before versions)."""
    return table.column(name).to_numpy() if name in table.column_names else None


class _StringColumn:
    """Zero-copy access to the UTF-8 bytes of one Arrow string column."""

    def __init__(self, array: pa.Array) -> None:
        if isinstance(array, pa.ChunkedArray):
            array = array.chunk(0) if array.num_chunks else pa.array([], pa.string())
        large = pa.types.is_large_string(array.type)
        buffers = array.buffers()
        dtype = np.int64 if large else np.int32
        count = len(array) + 1
        offsets = (
            np.frombuffer(buffers[1], dtype=dtype) if buffers[1] else np.zeros(1, dtype)
        )
        self.offsets = offsets[array.offset : array.offset + count]
        # The same offsets as Python ints (a memoryview, no copy): indexing the
        # numpy array made two numpy scalars per string, most of a bisect step's
        # cost in row_of and in placing a layer's rows among ties.
        self._bounds: Sequence[int] = (
            np.ascontiguousarray(self.offsets)
            .data.cast("B")
            .cast("q" if large else "i")
        )
        self.data = (
            memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
        )
        self.length = len(array)

    def bytes_at(self, row: int) -> bytes:
        bounds = self._bounds
        return bytes(self.data[bounds[row] : bounds[row + 1]])

    def str_at(self, row: int) -> str:
        return self.bytes_at(row).decode("utf-8")

    def arrow(self) -> pa.Array:
        """The column as an Arrow string array over the same buffers (no copy)."""
        offsets = np.ascontiguousarray(self.offsets)
        return pa.Array.from_buffers(
            pa.string() if offsets.dtype == np.int32 else pa.large_string(),
            self.length,
            [None, pa.py_buffer(offsets), pa.py_buffer(self.data)],
        )


# Looking up more than 1 / HASH_PASS_RATIO of a board's players at once, one hash
# pass over its ids beats a binary search each (BoardSegment.rows_of).
HASH_PASS_RATIO = 64


def int_view(values: np.ndarray) -> Sequence[int]:
    """``values`` (integers) as a sequence whose items are Python ints: a
    memoryview of the array's own buffer when it is one contiguous native int64
    buffer, else a list (a copy, for odd layouts only)."""
    if (
        values.dtype == np.dtype(np.int64)
        and values.dtype.isnative
        and values.flags.c_contiguous
    ):
        return values.data.cast("B").cast("q")
    return values.astype(np.int64).tolist()  # type: ignore[no-any-return]


@dataclass
class BoardSegment:
    """One board of one generation, in display order (score desc, player id asc)."""

    board: str
    players: _StringColumn
    scores: np.ndarray
    index: np.ndarray
    bucket_lowers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bucket_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Encoded first rows (enc(score) + player id), filled by live top reads.
    encoded_prefix: list[bytes] = field(default_factory=list)
    # Shadowed players' scores (jobs/shadow.py): not on the board, but their own
    # rank read answers as if they were.
    hidden: dict[str, int] = field(default_factory=dict)
    # first_achieved boards: when each row's player reached its score (epoch ms),
    # the tie-break between score and player id; None on player_id boards.
    achieved: np.ndarray | None = None
    # Per row: the pair's version at the boundary; None for segments without it.
    versions: np.ndarray | None = None
    # rank: unique -- a row's rank is its position.
    unique_rank: bool = False
    # Per row: distinct scores among rows [0, row] (filled on first use).
    _distinct: np.ndarray | None = None
    # The scores ascending (filled on first use): vectorized counts per value.
    _ascending: np.ndarray | None = None
    # The scores as a buffer of Python ints (filled on first use): count_above's
    # bisection then runs in C (see there).
    _score_view: Sequence[int] | None = None

    @classmethod
    def load(cls, directory: Path, board: str, meta: dict[str, Any]) -> BoardSegment:
        table = read_arrow(directory / meta.get("file", segment_file(board)))
        index = read_arrow(directory / meta.get("index", index_file(board)))
        segment = cls(
            board=board,
            players=_StringColumn(table.column("player_id")),
            scores=table.column("score").to_numpy(),
            index=index.column("row").to_numpy(),
            achieved=optional_numpy(table, "achieved_ms"),
            versions=optional_numpy(table, "version"),
            unique_rank=meta.get("rank") == "unique",
        )
        if meta.get("hidden"):
            hidden = read_arrow(directory / meta["hidden"])
            segment.hidden = dict(
                zip(
                    hidden.column("player_id").to_pylist(),
                    hidden.column("score").to_pylist(),
                    strict=True,
                )
            )
        buckets_file = directory / meta.get("buckets", buckets_file_name(board))
        if buckets_file.exists():
            buckets = read_arrow(buckets_file)
            segment.bucket_lowers = buckets.column("lower").to_numpy()
            segment.bucket_counts = buckets.column("count").to_numpy()
        return segment

    @property
    def population(self) -> int:
        return int(len(self.scores))

    def row_of(self, player_id: str) -> int | None:
        """Display row of a player (bisect over the player-id index), None if absent."""
        key = player_id.encode("utf-8")
        index = self.index
        lo = bisect.bisect_left(
            range(len(index)), key, key=lambda i: self.players.bytes_at(int(index[i]))
        )
        if lo < len(index):
            row = int(index[lo])
            if self.players.bytes_at(row) == key:
                return row
        return None

    def rows_of(self, player_ids: Sequence[str]) -> np.ndarray:
        """:meth:`row_of` of many players at once (-1 for an absent one), in
        Arrow's kernels, where a ``row_of`` each costs about 20 us in Python at a
        million rows: a binary search of all of them (O(k log n) for k players)
        or, for more than a board's ``1 / HASH_PASS_RATIO``, one hash pass over
        its ids (O(n), the cheaper past that; searched / hashed at a million
        rows, best of 3 at load 3.5: 20 / 32 ms for 2,000 players, 28 / 40 ms
        for 16,000, 80 / 45 ms for 32,000)."""
        if len(player_ids) * HASH_PASS_RATIO > len(self.index):
            return self._hashed_rows(player_ids)
        return self._searched_rows(player_ids)

    def _hashed_rows(self, player_ids: Sequence[str]) -> np.ndarray:
        count, n = len(player_ids), len(self.index)
        if count == 0 or n == 0:
            return np.full(count, -1, np.int64)
        ids = self.players.arrow()
        position = {p: i for i, p in enumerate(dict.fromkeys(player_ids))}
        at = pc.index_in(ids, value_set=pa.array(list(position), ids.type))
        rows = np.flatnonzero(pc.is_valid(at).to_numpy(zero_copy_only=False))
        by_player = np.full(len(position), -1, np.int64)
        by_player[pc.fill_null(at, -1).to_numpy()[rows]] = rows
        if len(position) == count:  # no player twice: already in their order
            return by_player
        return by_player[[position[p] for p in player_ids]]

    def _searched_rows(self, player_ids: Sequence[str]) -> np.ndarray:
        count, n = len(player_ids), len(self.index)
        found = np.full(count, -1, np.int64)
        if count == 0 or n == 0:
            return found
        ids = self.players.arrow()
        wanted = pa.array(player_ids, ids.type)
        index = np.asarray(self.index, np.int64)
        lo, hi = np.zeros(count, np.int64), np.full(count, n, np.int64)
        open_ = np.arange(count)
        while len(open_):
            mid = (lo[open_] + hi[open_]) // 2
            below = pc.less(ids.take(index[mid]), wanted.take(open_))
            below = below.to_numpy(zero_copy_only=False)
            lo[open_[below]] = mid[below] + 1
            hi[open_[~below]] = mid[~below]
            open_ = open_[lo[open_] < hi[open_]]
        inside = np.flatnonzero(lo < n)
        rows = index[lo[inside]]
        same = pc.equal(ids.take(rows), wanted.take(inside))
        same = same.to_numpy(zero_copy_only=False)
        found[inside[same]] = rows[same]
        return found

    def version_at(self, row: int) -> int | None:
        """The pair's version at the boundary; None when the segment has none."""
        if self.versions is None:
            return None
        return int(self.versions[row])

    def count_above(self, score: int) -> int:
        """Number of players with a strictly higher score (scores are descending).

        Bisected over a memoryview of the mapped column, keyed by ``operator.neg``:
        the loop runs in C with no numpy scalar per step (a Python key over the
        array was 1.5-3.5 % of a live nearby's or dense rank's API CPU, py-spy,
        issue 26); a column that is not one plain buffer is bisected as before."""
        view = self._score_view
        if view is None:
            view = self._score_view = int_view(self.scores)
        return bisect.bisect_left(view, -score, key=operator.neg)

    def count_with(self, score: int) -> int:
        """Number of players with exactly ``score``."""
        return self.count_above(score - 1) - self.count_above(score)

    def distinct_above(self, score: int) -> int:
        """Number of distinct scores strictly higher than ``score`` (the dense
        rank of ``score`` is one more)."""
        at = self.count_above(score)
        if at == 0:
            return 0
        if self._distinct is None:
            scores = self.scores
            changes = np.ones(len(scores), dtype=np.int64)
            changes[1:] = scores[1:] != scores[:-1]
            self._distinct = np.cumsum(changes)
        return int(self._distinct[at - 1])

    def ascending_scores(self) -> np.ndarray:
        """The scores in ascending order (a copy made once): for counting many
        values at a time with ``np.searchsorted``."""
        if self._ascending is None:
            self._ascending = np.ascontiguousarray(self.scores[::-1], dtype=np.int64)
        return self._ascending

    def rank_of_score(self, score: int) -> int:
        """Competition rank of a score: 1 + players strictly above it."""
        return self.count_above(score) + 1

    def _order_key(self, i: int) -> tuple[int, int, bytes]:
        achieved = int(self.achieved[i]) if self.achieved is not None else 0
        return (-int(self.scores[i]), achieved, self.players.bytes_at(i))

    def first_row_after(
        self, score: int, player_id: str, achieved: int | None = None
    ) -> int:
        """First display row strictly after the ordering tuple (score, [achieved,]
        player id)."""
        key = (-score, achieved or 0, player_id.encode("utf-8"))
        return bisect.bisect_right(range(self.population), key, key=self._order_key)

    def first_row_at_or_after(
        self, score: int, player_id: str, achieved: int | None = None
    ) -> int:
        key = (-score, achieved or 0, player_id.encode("utf-8"))
        return bisect.bisect_left(range(self.population), key, key=self._order_key)

    def entry(self, row: int) -> dict[str, Any]:
        score = int(self.scores[row])
        return {
            "position": row + 1,
            "rank": row + 1 if self.unique_rank else self.rank_of_score(score),
            "playerId": self.players.str_at(row),
            "score": score,
        }

    def entries(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Rows [start, stop) in display order with their competition ranks."""
        start, stop = max(0, start), min(self.population, stop)
        out: list[dict[str, Any]] = []
        rank = 0
        previous: int | None = None
        view = self._score_view
        if view is None:
            view = self._score_view = int_view(self.scores)
        for row in range(start, stop):
            score = view[row]
            if self.unique_rank:
                rank = row + 1
            elif score != previous:
                # Rows are in display order: a score below the previous row's has
                # exactly ``row`` players above it; only the first row bisects.
                rank = self.rank_of_score(score) if previous is None else row + 1
                previous = score
            out.append(
                {
                    "position": row + 1,
                    "rank": rank,
                    "playerId": self.players.str_at(row),
                    "score": score,
                }
            )
        return out
