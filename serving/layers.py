"""Layered (copy-on-write) generations: a board's generation is a full base segment
(serving/segments.py) plus an ordered chain of layers, each holding only what one
generation changed (DESIGN.md, "Cost follows the change").

Files of one layer, in the generation directory that wrote it (named after that
generation so a chain's layers can sit side by side), each an Arrow IPC file
(:func:`serving.files.write_arrow`):

* ``<board>.<gen>.layer.arrow``: the changed players' new rows in display order
  (oriented score descending, then ``achieved_ms`` on ``first_achieved`` boards,
  then player id in UTF-8 byte order, as the base), with the base segment's
  columns (``player_id``, ``score``, optional ``achieved_ms`` and ``version``);
* ``<board>.<gen>.replaced.arrow``: ``player_id`` sorted by UTF-8 bytes: every
  player whose row in the parent (base + earlier layers) this layer takes away:
  the changed players and the removed ones. A layer row also replaces its
  player's earlier row when the list omits it.

A later generation hard-links its parent's base and layer files into its own
directory (as untouched boards are linked today), so every generation directory is
self-contained and retention needs nothing more to keep the base a retained
generation needs. The board's manifest entry names the base and the chain::

    "base": "g5",            # the generation that wrote the full base files
    "file"/"index"/"buckets": the base's files (linked),
    "layers": [{"generation": "g6", "file": ..., "replaced": ...}, ...]  # oldest first

:class:`LayeredSegment` answers every read a :class:`BoardSegment` answers, with the
same methods and attributes (a drop-in: consumers do not change), by merging the
base with the chain flattened into one sorted delta: counts above a score are the
base's, minus the replaced base rows above, plus the delta rows above; a display row
maps to a base or a delta row with two binary searches. The flattening costs the
changed rows (plus one hash pass over the base's ids when many rows are
replaced), never a sort of the base; only a consumer asking for whole columns
(``players.offsets``, ``index``, ``np.asarray(scores)``: the speed layer's partition
rows) materializes the merged board, once per mapped generation.

:func:`compacted` gives the merged board's columns, from which a compaction writes a
new full base (:func:`serving.segments.write_board_segment`).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serving.files import read_arrow, write_arrow
from serving.segments import (
    SEGMENT_SCHEMA,
    TIMED_SEGMENT_SCHEMA,
    VERSION_FIELD,
    BoardSegment,
    _StringColumn,
    board_entry,
    canonical_array,
    int_view,
    optional_numpy,
    write_board_segment,
)

REPLACED_SCHEMA = pa.schema([("player_id", pa.string())])


def layer_file(board: str, generation: str) -> str:
    return f"{board}.{generation}.layer.arrow"


def replaced_file(board: str, generation: str) -> str:
    return f"{board}.{generation}.replaced.arrow"


def is_layered(meta: Mapping[str, Any]) -> bool:
    return bool(meta.get("layers"))


def layer_rows(meta: Mapping[str, Any]) -> int:
    """Rows the chain's layers hold (the compaction's measure against the base)."""
    return sum(int(layer.get("rows", 0)) for layer in meta.get("layers", ()))


# ------------------------------------------------------------------------- writer


def _display_key(score: int, achieved: int, player: str) -> tuple[int, int, bytes]:
    return (-score, achieved, player.encode("utf-8"))


def write_board_layer(
    directory: Path,
    board: str,
    generation: str,
    rows: Iterable[tuple[str, int, int | None, int | None]],
    replaced: Iterable[str],
) -> dict[str, Any]:
    """Write one layer from (player_id, oriented score, achieved_ms or None, version
    or None) rows in any order and the replaced player ids; returns the chain entry
    (``generation``, ``file``, ``replaced``, ``rows``, ``checksums``).

    ``achieved_ms`` (and ``version``) must be given for every row or for none.

    Sorted by Arrow, not by a Python key per row (the key was about half of the
    time to write a layer of 4,500 rows, the 1 M bench's size): score descending,
    achieved_ms ascending, then the player id in UTF-8 byte order, which is how
    Arrow orders strings (the files are the same bytes as the key's)."""
    items = list(rows)
    timed = bool(items) and items[0][2] is not None
    versioned = bool(items) and items[0][3] is not None
    columns: list[pa.Array] = [
        pa.array([r[0] for r in items], pa.string()),
        pa.array([r[1] for r in items], pa.int64()),
    ]
    schema = SEGMENT_SCHEMA
    keys = [("score", "descending")]
    if timed:
        columns.append(pa.array([r[2] for r in items], pa.int64()))
        schema = TIMED_SEGMENT_SCHEMA
        keys.append(("achieved_ms", "ascending"))
    keys.append(("player_id", "ascending"))
    if versioned:
        columns.append(pa.array([r[3] for r in items], pa.int64()))
        schema = schema.append(VERSION_FIELD)
    unsorted = pa.table(columns, schema=schema)
    table = unsorted.take(pc.sort_indices(unsorted, sort_keys=keys))
    table = pa.table(
        [canonical_array(c.combine_chunks()) for c in table.columns], schema=schema
    )
    gone = pa.array(list(set(replaced)), pa.string())
    gone = canonical_array(gone.take(pc.sort_indices(gone)))
    names = {
        "file": layer_file(board, generation),
        "replaced": replaced_file(board, generation),
    }
    sums = {
        names["file"]: write_arrow(directory / names["file"], table),
        names["replaced"]: write_arrow(
            directory / names["replaced"],
            pa.table([gone], schema=REPLACED_SCHEMA),
        ),
    }
    return {"generation": generation, **names, "rows": len(items), "checksums": sums}


# ------------------------------------------------------------------------- reader


@dataclass
class Layer:
    """One layer's rows (display order) and the players it replaces."""

    players: list[str]
    scores: np.ndarray
    achieved: np.ndarray | None = None
    versions: np.ndarray | None = None
    replaced: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, directory: Path, entry: Mapping[str, Any]) -> Layer:
        table = read_arrow(directory / entry["file"])
        gone = read_arrow(directory / entry["replaced"])
        return cls(
            players=table.column("player_id").to_pylist(),
            scores=table.column("score").to_numpy(),
            achieved=optional_numpy(table, "achieved_ms"),
            versions=optional_numpy(table, "version"),
            replaced=gone.column("player_id").to_pylist(),
        )


class _MergedColumn:
    """A per-row column of the merged board (scores, achieved, versions): indexing
    maps display rows to the base or the delta; whole-column use materializes."""

    def __init__(
        self, owner: LayeredSegment, base: np.ndarray, delta: np.ndarray
    ) -> None:
        self._owner = owner
        self._base = base
        self._delta = delta
        self._full: np.ndarray | None = None
        self.dtype = base.dtype if len(base) else delta.dtype

    def __len__(self) -> int:
        return self._owner.population

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    @property
    def size(self) -> int:
        return len(self)

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        is_delta, source = self._owner._sources(rows)
        if len(self._delta) == 0:
            return self._base[source]
        out = np.where(
            is_delta,
            self._delta[np.where(is_delta, source, 0)],
            self._base[np.where(is_delta, 0, source)] if len(self._base) else 0,
        )
        return out.astype(self.dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        if self._full is not None:
            return self._full[key]
        if isinstance(key, (int, np.integer)):
            row = int(key)
            if row < 0:
                row += len(self)
            if not 0 <= row < len(self):
                raise IndexError(key)
            is_delta, source = self._owner._source(row)
            return self._delta[source] if is_delta else self._base[source]
        if isinstance(key, slice):
            # Only the rows asked for (a live nearby slices a few rows per read).
            return self._gather(np.arange(*key.indices(len(self)), dtype=np.int64))
        rows = np.asarray(key, dtype=np.int64)
        rows = np.where(rows < 0, rows + len(self), rows)
        return self._gather(rows)

    def full(self) -> np.ndarray:
        if self._full is None:
            self._full = self._gather(np.arange(len(self), dtype=np.int64))
        return self._full

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        full = self.full()
        return full if dtype is None else full.astype(dtype)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return self.full().astype(dtype, copy=copy)

    def tolist(self) -> list[Any]:
        return self.full().tolist()

    def __iter__(self) -> Any:
        return iter(self.full())


class _MergedStrings:
    """The merged board's player ids with :class:`_StringColumn`'s interface:
    ``bytes_at``/``str_at`` map one row; ``offsets``/``data`` materialize."""

    def __init__(self, owner: LayeredSegment) -> None:
        self._owner = owner
        self._full: _StringColumn | None = None

    @property
    def length(self) -> int:
        return self._owner.population

    def bytes_at(self, row: int) -> bytes:
        is_delta, source = self._owner._source(row)
        if is_delta:
            return self._owner._d_bytes[source]
        return self._owner.base.players.bytes_at(source)

    def str_at(self, row: int) -> str:
        return self.bytes_at(row).decode("utf-8")

    def full(self) -> _StringColumn:
        if self._full is None:
            self._full = _StringColumn(self._owner._merged_players())
        return self._full

    @property
    def offsets(self) -> np.ndarray:
        return self.full().offsets

    @property
    def data(self) -> memoryview:
        return self.full().data


class LayeredSegment(BoardSegment):
    """A base segment merged with an ordered chain of layers: the same interface as
    :class:`BoardSegment` (rows in display order, O(log n) lookups)."""

    def __init__(
        self,
        base: BoardSegment,
        layers: Sequence[Layer],
        hidden: Mapping[str, int] | None = None,
    ) -> None:
        # BoardSegment's dataclass __init__ is not called: its per-row fields are
        # the merged views below.
        self.base = base
        self.board = base.board
        self.encoded_prefix = []
        self.hidden = dict(base.hidden if hidden is None else hidden)
        self.unique_rank = base.unique_rank
        self._distinct = None
        self._index: np.ndarray | None = None
        self._base_scores = int_view(np.asarray(base.scores))
        self._flatten(layers)
        self._players_view = _MergedStrings(self)
        self._scores_view = _MergedColumn(self, base.scores, self._d_scores)
        self._achieved_view = (
            None
            if base.achieved is None and self._d_achieved is None
            else _MergedColumn(
                self,
                base.achieved if base.achieved is not None else np.zeros(0, np.int64),
                self._d_achieved
                if self._d_achieved is not None
                else np.zeros(0, np.int64),
            )
        )
        self._versions_view = (
            None
            if base.versions is None
            else _MergedColumn(
                self,
                base.versions,
                self._d_versions
                if self._d_versions is not None
                else np.zeros(len(self._d_scores), np.int64),
            )
        )
        self._bucket_lowers, self._bucket_counts = self._buckets()

    # -- the chain, flattened ------------------------------------------------

    def _flatten(self, layers: Sequence[Layer]) -> None:
        base = self.base
        timed = base.achieved is not None or any(
            layer.achieved is not None for layer in layers
        )
        delta: dict[str, tuple[int, int, int]] = {}
        removed: set[str] = set()
        for layer in layers:
            for player in (*layer.replaced, *layer.players):
                if delta.pop(player, None) is None:
                    removed.add(player)
            for i, player in enumerate(layer.players):
                delta[player] = (
                    int(layer.scores[i]),
                    int(layer.achieved[i]) if layer.achieved is not None else 0,
                    int(layer.versions[i]) if layer.versions is not None else 0,
                )
        items = sorted(
            delta.items(), key=lambda kv: _display_key(kv[1][0], kv[1][1], kv[0])
        )
        self._d_players = [p for p, _ in items]
        self._d_bytes = [p.encode("utf-8") for p in self._d_players]
        self._d_scores = np.array([v[0] for _, v in items], np.int64)
        self._d_achieved = (
            np.array([v[1] for _, v in items], np.int64) if timed else None
        )
        self._d_versions = np.array([v[2] for _, v in items], np.int64)
        self._d_row = {p: j for j, p in enumerate(self._d_players)}
        self._d_keys = [
            (-int(s), int(a), b)
            for s, a, b in zip(
                self._d_scores.tolist(),
                self._d_achieved.tolist()
                if self._d_achieved is not None
                else [0] * len(items),
                self._d_bytes,
                strict=True,
            )
        ]
        self._removed_players = removed
        found = base.rows_of(sorted(removed))
        self._removed = np.sort(found[found >= 0])
        # Kept base rows before each removed one (non-decreasing): the k-th kept
        # base row is k + searchsorted(_kept_before, k, "right").
        self._kept_before = self._removed - np.arange(len(self._removed))
        # Base rows (kept or not) before each delta row, then its display row: the
        # rows of higher scores in one vector search, a bisect only among ties.
        descending = -np.asarray(base.scores, np.int64)
        lo = np.searchsorted(descending, -self._d_scores, side="left")
        hi = np.searchsorted(descending, -self._d_scores, side="right")
        before = lo.copy()
        tied = np.flatnonzero(hi > lo).tolist()
        lo_list, hi_list = lo.tolist(), hi.tolist()
        if timed:
            for j in tied:
                before[j] = lo_list[j] + bisect.bisect_left(
                    range(lo_list[j], hi_list[j]), self._d_keys[j], key=base._order_key
                )
        else:
            # Among equal scores base rows are in id byte order: bisect the ids alone.
            bytes_at = base.players.bytes_at
            for j in tied:
                before[j] = lo_list[j] + bisect.bisect_left(
                    range(lo_list[j], hi_list[j]), self._d_bytes[j], key=bytes_at
                )
        self._d_before = before.astype(np.int64)
        self._d_display = (
            np.arange(len(items), dtype=np.int64)
            + self._d_before
            - np.searchsorted(self._removed, self._d_before, side="left")
        )
        self._population = base.population - len(self._removed) + len(items)
        # Dense counts: per score the chain touches, +1/-1 when the merge adds or
        # drops that score from the base's distinct scores (descending by score).
        gone = base.scores[self._removed] if len(self._removed) else np.zeros(0)
        gone_values, gone_counts = np.unique(gone.astype(np.int64), return_counts=True)
        added_values, added_counts = np.unique(self._d_scores, return_counts=True)
        touched = sorted(
            set(gone_values.tolist()) | set(added_values.tolist()), reverse=True
        )
        lost = dict(zip(gone_values.tolist(), gone_counts.tolist(), strict=True))
        won = dict(zip(added_values.tolist(), added_counts.tolist(), strict=True))
        changes: list[int] = []
        for value in touched:
            had = base.count_with(value)
            merged = had - lost.get(value, 0) + won.get(value, 0) > 0
            changes.append(int(merged) - int(had > 0))
        self._dense_values = np.array([-v for v in touched], np.int64)  # ascending
        self._dense_change = np.cumsum(np.array(changes, np.int64))
        # The same vectors as sequences of Python ints for the one-row reads
        # (rank, nearby, count above): bisect runs in C over them, where a numpy
        # call on a scalar costs microseconds each (and a negation of the delta's
        # scores per count_above cost 25 us at 50,000 delta rows).
        self._d_neg = -self._d_scores
        self._d_neg_view = int_view(self._d_neg)
        self._d_score_list: list[int] = self._d_scores.tolist()
        self._removed_view = int_view(self._removed)
        self._kept_before_view = int_view(self._kept_before)
        self._d_before_view = int_view(self._d_before)
        self._d_display_view = int_view(self._d_display)
        self._dense_values_view = int_view(self._dense_values)
        self._dense_change_list: list[int] = self._dense_change.tolist()

    def _sources(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For display rows: (is a delta row, its delta row or base row)."""
        display = self._d_display
        at = np.searchsorted(display, rows, side="left")
        hit = at < len(display)
        hit[hit] = display[at[hit]] == rows[hit]
        kept = rows - at  # kept base rows before a base-sourced row
        base_rows = kept + np.searchsorted(self._kept_before, kept, side="right")
        return hit, np.where(hit, at, base_rows)

    def _source(self, row: int) -> tuple[bool, int]:
        """:meth:`_sources` for one display row, without numpy."""
        display = self._d_display_view
        at = bisect.bisect_left(display, row)
        if at < len(display) and display[at] == row:
            return True, at
        kept = row - at
        return False, kept + bisect.bisect_right(self._kept_before_view, kept)

    def _walk(self, start: int, stop: int) -> Iterator[tuple[bool, int]]:
        """:meth:`_source` of the display rows [start, stop), in order: two
        bisections for the first row, then one step per row (the next delta row,
        or the next base row that was not replaced)."""
        display, removed = self._d_display_view, self._removed_view
        at = bisect.bisect_left(display, start)
        kept = start - at
        base_row = kept + bisect.bisect_right(self._kept_before_view, kept)
        gone = bisect.bisect_left(removed, base_row)
        for row in range(start, stop):
            if at < len(display) and display[at] == row:
                yield True, at
                at += 1
                continue
            while gone < len(removed) and removed[gone] == base_row:
                base_row += 1
                gone += 1
            yield False, base_row
            base_row += 1

    def _merged_players(self) -> pa.Array:
        base = self.base.players.arrow().cast(pa.string())
        combined = pa.concat_arrays([base, pa.array(self._d_players, pa.string())])
        is_delta, source = self._sources(np.arange(self._population, dtype=np.int64))
        take = np.where(is_delta, source + self.base.population, source)
        return canonical_array(combined.take(pa.array(take, pa.int64())))

    def _buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """The base's buckets with the chain's rows moved: a replaced row leaves its
        bucket, a delta row joins its own; empty buckets merge into the one below
        and the first lower is the merged board's minimum."""
        lowers = np.array(self.base.bucket_lowers, np.int64)
        counts = np.array(self.base.bucket_counts, np.int64)
        if self._population == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if len(lowers) == 0:
            lowers = np.array([int(self._d_scores.min())], np.int64)
            counts = np.zeros(1, np.int64)
        gone: np.ndarray = (
            self.base.scores[self._removed]
            if len(self._removed)
            else np.zeros(0, np.int64)
        )
        for scores, sign in ((gone, -1), (self._d_scores, 1)):
            if len(scores):
                where = np.clip(
                    np.searchsorted(lowers, scores, side="right") - 1, 0, None
                )
                np.add.at(counts, where, sign)
        keep = counts > 0
        lowers, counts = lowers[keep], counts[keep]
        lowers[0] = int(self._scores_view[-1])
        return lowers, counts

    # -- BoardSegment's per-row fields, merged --------------------------------

    @property  # type: ignore[override]
    def players(self) -> Any:
        return self._players_view

    @players.setter
    def players(self, value: Any) -> None:
        raise AttributeError("a layered segment's columns are read-only")

    @property  # type: ignore[override]
    def scores(self) -> Any:
        return self._scores_view

    @scores.setter
    def scores(self, value: Any) -> None:
        raise AttributeError("a layered segment's columns are read-only")

    @property  # type: ignore[override]
    def achieved(self) -> Any:
        return self._achieved_view

    @achieved.setter
    def achieved(self, value: Any) -> None:
        raise AttributeError("a layered segment's columns are read-only")

    @property  # type: ignore[override]
    def versions(self) -> Any:
        return self._versions_view

    @versions.setter
    def versions(self, value: Any) -> None:
        raise AttributeError("a layered segment's columns are read-only")

    @property  # type: ignore[override]
    def index(self) -> Any:
        if self._index is None:
            players = self._players_view.full().arrow()
            self._index = pc.sort_indices(players).cast(pa.uint32()).to_numpy()
        return self._index

    @index.setter
    def index(self, value: Any) -> None:
        raise AttributeError("a layered segment's columns are read-only")

    @property  # type: ignore[override]
    def bucket_lowers(self) -> Any:
        return self._bucket_lowers

    @bucket_lowers.setter
    def bucket_lowers(self, value: Any) -> None:
        raise AttributeError("a layered segment's columns are read-only")

    @property  # type: ignore[override]
    def bucket_counts(self) -> Any:
        return self._bucket_counts

    @bucket_counts.setter
    def bucket_counts(self, value: Any) -> None:
        raise AttributeError("a layered segment's columns are read-only")

    # -- reads -----------------------------------------------------------------

    @property
    def population(self) -> int:
        return self._population

    @property
    def layer_rows(self) -> int:
        """Rows of the flattened delta (what a compaction measures)."""
        return len(self._d_players)

    def row_of(self, player_id: str) -> int | None:
        j = self._d_row.get(player_id)
        if j is not None:
            return int(self._d_display[j])
        if player_id in self._removed_players:
            return None
        row = self.base.row_of(player_id)
        if row is None:
            return None
        return (
            row
            - bisect.bisect_left(self._removed_view, row)
            + bisect.bisect_right(self._d_before_view, row)
        )

    def rows_of(self, player_ids: Sequence[str]) -> np.ndarray:
        """:meth:`row_of` of many players at once (-1 for an absent one): the
        delta's by its dict, the rest by the base's vectorized search, shifted
        past the removed rows and the delta rows before them."""
        found = np.full(len(player_ids), -1, np.int64)
        in_base: list[int] = []
        for i, player in enumerate(player_ids):
            j = self._d_row.get(player)
            if j is not None:
                found[i] = self._d_display[j]
            elif player not in self._removed_players:
                in_base.append(i)
        if in_base:
            at = np.array(in_base, np.int64)
            rows = self.base.rows_of([player_ids[i] for i in in_base])
            hit = rows >= 0
            rows = rows[hit]
            found[at[hit]] = (
                rows
                - np.searchsorted(self._removed, rows, side="left")
                + np.searchsorted(self._d_before, rows, side="right")
            )
        return found

    def version_at(self, row: int) -> int | None:
        if self._versions_view is None:
            return None
        return int(self._versions_view[row])

    def count_above(self, score: int) -> int:
        above = self.base.count_above(score)
        removed = bisect.bisect_left(self._removed_view, above)
        added = bisect.bisect_left(self._d_neg_view, -score)
        return above - removed + added

    def distinct_above(self, score: int) -> int:
        # Base distinct scores above, corrected by the touched scores above.
        base = self.base.distinct_above(score)
        at = bisect.bisect_left(self._dense_values_view, -score)
        return base + (self._dense_change_list[at - 1] if at else 0)

    def first_row_after(
        self, score: int, player_id: str, achieved: int | None = None
    ) -> int:
        b = self.base.first_row_after(score, player_id, achieved)
        key = (-score, achieved or 0, player_id.encode("utf-8"))
        return (
            b
            - bisect.bisect_left(self._removed_view, b)
            + bisect.bisect_right(self._d_keys, key)
        )

    def first_row_at_or_after(
        self, score: int, player_id: str, achieved: int | None = None
    ) -> int:
        b = self.base.first_row_at_or_after(score, player_id, achieved)
        key = (-score, achieved or 0, player_id.encode("utf-8"))
        return (
            b
            - bisect.bisect_left(self._removed_view, b)
            + bisect.bisect_left(self._d_keys, key)
        )

    def entry(self, row: int) -> dict[str, Any]:
        return self.entries(row, row + 1)[0]

    def entries(self, start: int, stop: int) -> list[dict[str, Any]]:
        start, stop = max(0, start), min(self.population, stop)
        if stop <= start:
            return []
        out: list[dict[str, Any]] = []
        previous: int | None = None
        rank = 0
        base_players = self.base.players
        for row, (is_delta, source) in zip(
            range(start, stop), self._walk(start, stop), strict=True
        ):
            if is_delta:
                score, player = self._d_score_list[source], self._d_players[source]
            else:
                score = self._base_scores[source]
                player = base_players.str_at(source)
            if self.unique_rank:
                rank = row + 1
            elif score != previous:
                # Display order: only the first row's rank needs the counts.
                rank = self.rank_of_score(score) if previous is None else row + 1
                previous = score
            out.append(
                {"position": row + 1, "rank": rank, "playerId": player, "score": score}
            )
        return out

    @classmethod
    def load(  # type: ignore[override]
        cls, directory: Path, board: str, meta: dict[str, Any]
    ) -> LayeredSegment:
        base = BoardSegment.load(directory, board, meta)
        layers = [Layer.load(directory, entry) for entry in meta.get("layers", ())]
        return cls(base, layers)


def load_board(directory: Path, board: str, meta: dict[str, Any]) -> BoardSegment:
    """The board's segment: a :class:`LayeredSegment` when the manifest names a
    layer chain, else the full :class:`BoardSegment`."""
    if is_layered(meta):
        return LayeredSegment.load(directory, board, meta)
    return BoardSegment.load(directory, board, meta)


def compacted(
    segment: BoardSegment,
) -> tuple[pa.Array, pa.Array, pa.Array | None, pa.Array | None]:
    """The merged board's columns in display order (player_id, score, achieved_ms
    or None, version or None), for writing a new full base."""
    if isinstance(segment, LayeredSegment):
        players = segment._merged_players()
    else:
        players = segment.players.arrow().cast(pa.string())
    scores = pa.array(np.asarray(segment.scores, np.int64), pa.int64())
    achieved = (
        None
        if segment.achieved is None
        else pa.array(np.asarray(segment.achieved, np.int64), pa.int64())
    )
    versions = (
        None
        if segment.versions is None
        else pa.array(np.asarray(segment.versions, np.int64), pa.int64())
    )
    return players, scores, achieved, versions


def compact_board(
    directory: Path,
    previous_dir: Path,
    board: str,
    meta: Mapping[str, Any],
    bucket_target: int,
) -> dict[str, Any]:
    """Write the board of manifest entry ``meta`` (in ``previous_dir``, layered or
    not) into ``directory`` as one full base with the same answers and return its
    manifest entry (with every file's checksum). Nothing is linked: the new base
    stands alone, so a compacted generation needs no older generation's files."""
    players, scores, achieved, versions = compacted(
        load_board(previous_dir, board, dict(meta))
    )
    sums = write_board_segment(
        directory, board, players, scores, bucket_target, achieved, versions
    )
    entry = board_entry(board, len(players), sums)
    # The read rules of the board travel with it (ties by first achieved, unique).
    for key in ("tieBreak", "rank"):
        if key in meta:
            entry[key] = meta[key]
    return entry


# ------------------------------------------------------------- next generation


def chain_files(meta: Mapping[str, Any]) -> list[str]:
    """The files of a layered board's base and layers (what the next generation
    links), without the hidden side file (each generation writes its own)."""
    names = [meta[k] for k in ("file", "index", "buckets") if k in meta]
    for layer in meta.get("layers", ()):
        names += [layer["file"], layer["replaced"]]
    return names


def link_chain(
    directory: Path,
    previous_dir: Path,
    meta: Mapping[str, Any],
    checksums: Mapping[str, str],
) -> dict[str, str]:
    """Hard-link the base and layer files of the board entry ``meta`` (in
    ``previous_dir``) into ``directory``, once; returns their checksums (what the
    new layer's entry lists beside its own files)."""
    sums: dict[str, str] = {}
    for name in chain_files(meta):
        target = directory / name
        if not target.exists():
            os.link(previous_dir / name, target)
        sums[name] = checksums[name]
    return sums


def base_population(meta: Mapping[str, Any]) -> int:
    return int(meta.get("basePopulation", meta.get("population", 0)))


def needs_compaction(
    meta: Mapping[str, Any], changed: int, max_fraction: float, max_chain: int
) -> bool:
    """Whether a board whose parent entry is ``meta`` gets a full base instead of
    one more layer of ``changed`` rows: the chain would pass ``max_chain`` layers
    or its layer rows ``max_fraction`` of the base's rows."""
    chain = len(meta.get("layers", ())) + 1
    rows = layer_rows(meta) + changed
    return chain > max_chain or rows > max_fraction * max(1, base_population(meta))


def _columns(table: pa.Table, names: Sequence[str]) -> pa.Table:
    return table.select([n for n in names if n in table.column_names])


def write_layer_over(
    directory: Path,
    previous_dir: Path,
    previous_meta: Mapping[str, Any],
    checksums: Mapping[str, str],
    board: str,
    generation: str,
    rows: pa.Table,
    max_fraction: float,
    max_chain: int,
) -> dict[str, Any] | None:
    """The board's next generation as one layer over its parent (``previous_meta``
    in ``previous_dir``, with its files' ``checksums``): ``rows`` is the board's
    new rows (player_id, score, optional achieved_ms, version) in display order.

    Links the parent's base and layer files into ``directory``, writes a layer of
    the rows that differ from the parent's (and the players it no longer holds) and
    returns the manifest entry (with every file's checksum); None when the board
    is due a compaction (:func:`needs_compaction`): the caller writes it in full."""
    parent = load_board(previous_dir, board, dict(previous_meta))
    names = ["player_id", "score", "achieved_ms", "version"]
    new = _columns(rows, names)
    for name in new.column_names[1:]:
        # A pair the log never named is at version 0 (as the full writer fills it).
        column = new.column(name).cast(pa.int64())
        if name == "version":
            column = pc.fill_null(column, 0)
        new = new.set_column(new.column_names.index(name), name, column)
    before = compacted(parent)
    old_columns = {"player_id": before[0], "score": before[1]}
    if before[2] is not None:
        old_columns["achieved_ms"] = before[2]
    if before[3] is not None:
        old_columns["version"] = before[3]
    old = pa.table(old_columns)
    compared = [
        n for n in new.column_names if n != "player_id" and n in old.column_names
    ]
    if len(compared) != len(new.column_names) - 1:
        return None  # the columns changed (e.g. versions added): write in full
    renamed = old.rename_columns(
        ["player_id", *(f"old_{n}" for n in old.column_names[1:])]
    )
    joined = new.join(renamed, "player_id", join_type="left outer")
    differs = pc.is_null(joined.column(f"old_{compared[0]}"))
    for name in compared:
        differs = pc.or_(
            differs,
            pc.fill_null(
                pc.not_equal(joined.column(name), joined.column(f"old_{name}")), True
            ),
        )
    changed = joined.filter(differs)
    removed = old.join(new.select(["player_id"]), "player_id", join_type="left anti")
    if needs_compaction(previous_meta, changed.num_rows, max_fraction, max_chain):
        return None
    sums = link_chain(directory, previous_dir, previous_meta, checksums)
    timed = "achieved_ms" in changed.column_names
    versioned = "version" in changed.column_names
    layer = write_board_layer(
        directory,
        board,
        generation,
        zip(
            changed.column("player_id").to_pylist(),
            changed.column("score").to_pylist(),
            changed.column("achieved_ms").to_pylist()
            if timed
            else [None] * changed.num_rows,
            changed.column("version").to_pylist()
            if versioned
            else [None] * changed.num_rows,
            strict=True,
        ),
        [
            *changed.column("player_id").to_pylist(),
            *removed.column("player_id").to_pylist(),
        ],
    )
    sums.update(layer.pop("checksums"))
    entry = _layered_entry(previous_meta, previous_dir, layer, new.num_rows)
    entry["checksums"] = sums
    return entry


# ---------------------------------------------------- next generation, from changes


@dataclass(frozen=True, slots=True)
class Parent:
    """A board's entry in the previous generation: its directory, manifest entry
    and the checksums of the files it names (what a layer over it links)."""

    directory: Path
    meta: Mapping[str, Any]
    checksums: Mapping[str, str]


def apply_changes(
    directory: Path,
    board: str,
    generation: str,
    parent: Parent | None,
    changes: Mapping[str, tuple[int, int | None] | None],
    named: Mapping[str, int],
    side: Mapping[str, int],
    bucket_target: int,
    order: tuple[bool, bool] = (False, False),
    layering: tuple[float, int] | None = None,
) -> tuple[dict[str, Any] | None, dict[str, int]]:
    """The board's next generation from what changed, never from its whole rows.

    ``changes``: player -> its new (oriented score, achieved_ms or None), or None
    when it has no public row any more (its total went, or it is shadowed): every
    (board, player) whose total the build re-derived (gold_changes, jobs/tables.py).
    ``named``: player -> the version the delta's log named; ``side``: the parent's
    versions side file (player -> version of a pair without a public row).

    A player named but not changed keeps its parent row with the newer version. The
    board is written as one more layer over ``parent`` when ``layering`` (max
    fraction, max chain) allows (:func:`needs_compaction`), else in full from the
    parent merged with the changes (a compaction; also every board without a
    parent). Returns the manifest entry (None: no public row left) and the new side
    file's pairs."""
    timed = order[0]
    base = (
        None
        if parent is None
        else load_board(parent.directory, board, dict(parent.meta))
    )
    rows: list[tuple[str, int, int | None, int]] = []
    replaced: list[str] = []
    new_side = {p: v for p, v in side.items() if p not in changes and p not in named}
    ordered = sorted({*changes, *named})
    # Every changed or named player's parent row, score, achieved time and
    # version, each in one vectorized read (a layered parent's columns map rows
    # to base or delta in numpy too), not one Python look-up per player.
    parent_rows: dict[str, tuple[int, int | None, int]] = {}
    if base is not None and ordered:
        found = base.rows_of(ordered)
        at = np.flatnonzero(found >= 0)
        rows_at = found[at]
        scores = np.asarray(base.scores[rows_at], np.int64).tolist()
        achieved_at = (
            [None] * len(at)
            if base.achieved is None
            else np.asarray(base.achieved[rows_at], np.int64).tolist()
        )
        versions_at = (
            [0] * len(at)
            if base.versions is None
            else np.asarray(base.versions[rows_at], np.int64).tolist()
        )
        for i, score, achieved_ms, version in zip(
            at.tolist(), scores, achieved_at, versions_at, strict=True
        ):
            parent_rows[ordered[i]] = (score, achieved_ms, version)
    for player in ordered:
        kept: tuple[int, int | None] | None = None
        parent_row = parent_rows.get(player)
        if parent_row is not None:
            replaced.append(player)
            kept = parent_row[:2]
            before = parent_row[2]
        else:
            before = side.get(player, 0)
        version = max(named.get(player, 0), before)
        public = changes[player] if player in changes else kept
        if public is None:
            if version > 0:
                new_side[player] = version
            continue
        score, achieved = public
        rows.append((player, score, (achieved or 0) if timed else None, version))
    population = (0 if base is None else base.population) - len(replaced) + len(rows)
    if population == 0:
        return None, new_side
    if (
        layering is not None
        and parent is not None
        and base is not None
        and base.versions is not None
        and (base.achieved is not None) == timed
        and not needs_compaction(parent.meta, len(rows), *layering)
    ):
        sums = link_chain(directory, parent.directory, parent.meta, parent.checksums)
        layer = write_board_layer(directory, board, generation, rows, replaced)
        sums.update(layer.pop("checksums"))
        entry = _layered_entry(parent.meta, parent.directory, layer, population)
        entry["checksums"] = sums
        return entry, new_side
    players, scores, achieved, versions = _merged(base, rows, set(replaced), timed)
    sums = write_board_segment(
        directory, board, players, scores, bucket_target, achieved, versions
    )
    entry = board_entry(board, len(players), sums)
    if timed:
        entry["tieBreak"] = "first_achieved"
    if order[1]:
        entry["rank"] = "unique"
    return entry, new_side


def _layered_entry(
    previous_meta: Mapping[str, Any],
    previous_dir: Path,
    layer: dict[str, Any],
    population: int,
) -> dict[str, Any]:
    """A layered board's manifest entry: the parent's base files and chain plus
    ``layer`` (without checksums: the caller adds every file's)."""
    entry = {
        k: previous_meta[k]
        for k in ("file", "index", "buckets", "sha256", "tieBreak", "rank")
        if k in previous_meta
    }
    entry["population"] = population
    entry["base"] = previous_meta.get("base", previous_dir.name)
    entry["basePopulation"] = base_population(previous_meta)
    entry["layers"] = [*previous_meta.get("layers", ()), layer]
    return entry


def _merged(
    base: BoardSegment | None,
    rows: Sequence[tuple[str, int, int | None, int]],
    replaced: set[str],
    timed: bool,
) -> tuple[pa.Array, pa.Array, pa.Array | None, pa.Array]:
    """The parent's rows without ``replaced``, plus ``rows``, in display order."""
    parts = []
    if base is not None and base.population:
        players, scores, achieved, versions = compacted(base)
        n = len(players)
        table = pa.table(
            {
                "player_id": players,
                "score": scores,
                "achieved_ms": achieved
                if timed and achieved is not None
                else pa.array(np.zeros(n, np.int64)),
                "version": versions
                if versions is not None
                else pa.array(np.zeros(n, np.int64)),
            }
        )
        if replaced:
            keep = pc.invert(
                pc.is_in(
                    table.column("player_id"), pa.array(sorted(replaced), pa.string())
                )
            )
            table = table.filter(keep)
        parts.append(table)
    parts.append(
        pa.table(
            {
                "player_id": pa.array([r[0] for r in rows], pa.string()),
                "score": pa.array([r[1] for r in rows], pa.int64()),
                "achieved_ms": pa.array([r[2] or 0 for r in rows], pa.int64()),
                "version": pa.array([r[3] for r in rows], pa.int64()),
            }
        )
    )
    table = pa.concat_tables(parts)
    # Display order: oriented score descending, then first achieved, then player id
    # in UTF-8 byte order (Arrow compares strings by their bytes).
    table = table.sort_by(
        [
            ("score", "descending"),
            ("achieved_ms", "ascending"),
            ("player_id", "ascending"),
        ]
    )
    return (
        table.column("player_id").combine_chunks(),
        table.column("score").combine_chunks(),
        table.column("achieved_ms").combine_chunks() if timed else None,
        table.column("version").combine_chunks(),
    )
