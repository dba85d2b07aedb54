"""The contributions index of a generation (one home: format, writer, reader).

The history read (API.md "Why a rank changed") lists a player's accepted
contributions to a board between two snapshots: each applied log record's
``eventId``, ``matchId``, ``kind``, ``occurredAt`` and ``delta`` (the player's
total on the board after it minus the total after the player's previous applied
record of that board in its partition; 0 before the first). The API reads them
here, from files the publish job writes next to the segments (jobs/record_indexes.py),
never from the batch layer's tables.

An entry is one (board, player) item a log record applied
(:func:`record_contributions` says which: the item carries a ``total`` and its
status, or the record's, is ``accepted`` or ``released``). The index of a
generation is a chain of layers, oldest first, each an Arrow IPC file
(:func:`serving.files.write_arrow`) holding the entries of the log positions one
or more consecutive generations landed, sorted by (key, board, player, partition,
position)::

    contributions.<gen>.arrow   key u64, partition i32, position i64,
                                board dictionary<i32, string>, player_id string,
                                event_id, match_id, kind, occurred_at string
                                (nullable), delta i64, total i64

``key`` is h(board) XOR h(player), h the first 64 bits of blake2b of the name's
UTF-8 bytes after a byte of its own per field (so a writer hashes each distinct
board and player once, not each pair): one player's entries on one board are one
run per layer, found by two binary searches (the stored board
and player are compared, so a collision of keys costs a few more rows, never a
wrong answer). A layer's positions all follow its older neighbour's per partition
(boundaries only grow), so the chain read oldest first is in log order. ``total``
is what the next layer's writer needs to compute its first ``delta`` of a player
(the newest entry before it, :meth:`ContributionsIndex.last_totals`).

Cost follows the change: a generation writes one layer of what it landed since its
parent and hard-links the parent's layer files (so, as for segments and the landed
records index, a generation directory is self-contained and retention of
generation directories is all the retention the index needs); no layer when it
landed no contribution. The chain is kept short by merging its tail: while the
layer before the newest holds at most :data:`MERGE_FACTOR` times the newest's rows
(or the chain is longer than :data:`MAX_CHAIN`) the two are merged, so an entry is
rewritten O(log n) times over its life and a read searches O(log n) layers.
Nothing is dropped: a history's oldest listed snapshot lists every contribution
before it (``changes`` since the start), and an award snapshot is kept forever.

The manifest names the chain: ``"contributions": {"layers": [{"file", "rows"},
...], "rows": n}``. A generation without the entry (published before the index
existed) has no index; its next publish writes the full index in one layer.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from serving.files import read_arrow, write_arrow
from serving.log_records import board_items
from serving.segments import _StringColumn

APPLIED = frozenset({"accepted", "released"})
MANIFEST_KEY = "contributions"
# Merge the newest two layers while the older holds at most this many times the
# newer's rows: layer sizes grow geometrically from newest to oldest.
MERGE_FACTOR = 2
# A chain longer than this is merged from its tail until it is not (a read
# searches every layer).
MAX_CHAIN = 24

SCHEMA = pa.schema(
    [
        ("key", pa.uint64()),
        ("partition", pa.int32()),
        ("position", pa.int64()),
        ("board", pa.dictionary(pa.int32(), pa.string())),
        ("player_id", pa.string()),
        ("event_id", pa.string()),
        ("match_id", pa.string()),
        ("kind", pa.string()),
        ("occurred_at", pa.string()),
        ("delta", pa.int64()),
        ("total", pa.int64()),
    ]
)
BODY_COLUMNS = ("event_id", "match_id", "kind", "occurred_at", "delta")


def layer_file(generation: str) -> str:
    return f"contributions.{generation}.arrow"


BOARD_FIELD = b"\x01"
PLAYER_FIELD = b"\x02"


def _hash(field: bytes, name: str) -> int:
    digest = hashlib.blake2b(field + name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def key_of(board: str, player_id: str) -> int:
    return _hash(BOARD_FIELD, board) ^ _hash(PLAYER_FIELD, player_id)


@dataclass(frozen=True, slots=True)
class Applied:
    """One item a log record applied to a board (an entry before its delta)."""

    board: str
    player_id: str
    partition: int
    position: int
    event_id: str | None
    match_id: str | None
    kind: str
    occurred_at: str | None
    total: int


def _text(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else str(value)


def record_contributions(
    record: Mapping[str, Any], player_id: str, partition: int, position: int
) -> list[Applied]:
    """The items a log record (the speed layer's JSON, bronze ``raw``) applied:
    each board item with a ``total`` whose status (or the record's) is applied."""
    result = record.get("result") or {}
    status = result.get("status") or record.get("status")
    event = record.get("event") or {}
    out = []
    for item in board_items(result):
        board = item.get("board")
        if not isinstance(board, str) or "total" not in item:
            continue
        if (item.get("status") or status) not in APPLIED:
            continue
        out.append(
            Applied(
                board,
                player_id,
                int(partition),
                int(position),
                _text(event.get("eventId")),
                _text(event.get("matchId")),
                _text(event.get("kind")) or "result",
                _text(event.get("occurredAt")),
                int(item["total"]),
            )
        )
    return out


def _empty() -> pa.Table:
    return SCHEMA.empty_table()


ITEM_SCHEMA = pa.schema(
    [
        ("board", pa.string()),
        ("player_id", pa.string()),
        ("partition", pa.int32()),
        ("position", pa.int64()),
        ("event_id", pa.string()),
        ("match_id", pa.string()),
        ("kind", pa.string()),
        ("occurred_at", pa.string()),
        ("total", pa.int64()),
    ]
)
# The file's order: one (board, player) run per key, then partition and position.
SORT_KEYS = [
    ("key", "ascending"),
    ("board", "ascending"),
    ("player_id", "ascending"),
    ("partition", "ascending"),
    ("position", "ascending"),
]


def items_table(items: Iterable[Applied]) -> pa.Table:
    """Applied items as a table of :data:`ITEM_SCHEMA` (what :func:`layer_table`
    takes), filled column by column as ``items`` are produced: an item is not kept
    as an object."""
    columns: dict[str, list[Any]] = {f.name: [] for f in ITEM_SCHEMA}
    for item in items:
        for name, values in columns.items():
            values.append(getattr(item, name))
    return pa.table(
        [pa.array(columns[f.name], f.type) for f in ITEM_SCHEMA], schema=ITEM_SCHEMA
    )


def _sorted(table: pa.Table) -> pa.Table:
    """Rows in file order (:data:`SORT_KEYS`; the board compared by name)."""
    if table.num_rows == 0:
        return table
    keyed = table.set_column(
        table.column_names.index("board"),
        "board",
        table.column("board").cast(pa.string()),
    )
    return table.take(pc.sort_indices(keyed, sort_keys=SORT_KEYS))


def _field_hashes(field: bytes, names: pa.Array) -> np.ndarray:
    """h(name) per row, hashed once per distinct name."""
    codes = pc.dictionary_encode(names)
    distinct = np.array(
        [_hash(field, name) for name in codes.dictionary.to_pylist()], np.uint64
    )
    return distinct[codes.indices.to_numpy()]


def _keys(boards: pa.Array, players: pa.Array) -> np.ndarray:
    """:func:`key_of` per row."""
    return _field_hashes(BOARD_FIELD, boards) ^ _field_hashes(PLAYER_FIELD, players)


def layer_table(
    items: Iterable[Applied] | pa.Table, parent: ContributionsIndex | None
) -> pa.Table:
    """A layer's rows from the applied items of positions after the parent's
    boundary (any order; a table of :data:`ITEM_SCHEMA` or :class:`Applied`):
    each item's delta is its total minus the total after the player's previous
    item of the board in its partition (this layer's, else the parent's newest,
    else 0)."""
    table = items if isinstance(items, pa.Table) else items_table(items)
    table = table.select([f.name for f in ITEM_SCHEMA]).cast(ITEM_SCHEMA)
    table = table.combine_chunks()
    if table.num_rows == 0:
        return _empty()
    boards = table.column("board").chunk(0)
    players = table.column("player_id").chunk(0)
    table = table.append_column("key", pa.array(_keys(boards, players), pa.uint64()))
    table = _sorted(table).combine_chunks()
    n = table.num_rows
    key = table.column("key").to_numpy()
    partition = table.column("partition").to_numpy()
    total = table.column("total").to_numpy()
    board = table.column("board").chunk(0)
    player = table.column("player_id").chunk(0)
    # A group is one (board, player, partition): its rows are consecutive.
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = (
            (key[1:] != key[:-1])
            | (partition[1:] != partition[:-1])
            | pc.not_equal(board[1:], board[:-1]).to_numpy(zero_copy_only=False)
            | pc.not_equal(player[1:], player[:-1]).to_numpy(zero_copy_only=False)
        )
    previous = np.empty(n, np.int64)
    previous[1:] = total[:-1]
    starts = np.nonzero(first)[0]
    if parent is not None:
        found = parent.last_totals(
            list(
                zip(
                    board.take(pa.array(starts)).to_pylist(),
                    player.take(pa.array(starts)).to_pylist(),
                    partition[starts].tolist(),
                    strict=True,
                )
            )
        )
        previous[starts] = [0 if t is None else t for t in found]
    else:
        previous[starts] = 0
    delta = total - previous
    codes = board.dictionary_encode()
    return pa.table(
        [
            table.column("key"),
            table.column("partition"),
            table.column("position"),
            pa.DictionaryArray.from_arrays(
                codes.indices.cast(pa.int32()), codes.dictionary
            ),
            player,
            table.column("event_id"),
            table.column("match_id"),
            table.column("kind"),
            table.column("occurred_at"),
            pa.array(delta, pa.int64()),
            table.column("total"),
        ],
        schema=SCHEMA,
    )


def _merge(tables: Sequence[pa.Table]) -> pa.Table:
    """Adjacent layers (oldest first) as one: their rows, re-sorted (positions of
    one partition never repeat across layers)."""
    merged = pa.concat_tables([t.cast(SCHEMA) for t in tables], promote_options="none")
    # Each layer has its own board dictionary: unify them into one.
    merged = merged.unify_dictionaries().combine_chunks()
    return _sorted(merged)


class Layer:
    """One mapped layer: its sorted keys, partitions, positions and the board codes
    (numpy views of the memory-mapped file), the player ids' bytes; the other
    columns are read per found run."""

    def __init__(self, path: Path) -> None:
        self.table = read_arrow(path)
        self.rows = self.table.num_rows
        self._keys = self.table.column("key").to_numpy()
        self._partitions = self.table.column("partition").to_numpy()
        self._positions = self.table.column("position").to_numpy()
        boards = self.table.column("board")
        chunk = boards.chunk(0) if boards.num_chunks else None
        self._board_codes = (
            {b: k for k, b in enumerate(chunk.dictionary.to_pylist())}
            if chunk is not None
            else {}
        )
        self._boards = (
            chunk.indices.to_numpy() if chunk is not None else np.zeros(0, np.int32)
        )
        self._players = _StringColumn(self.table.column("player_id"))

    def rows_of(
        self, board: str, player_id: str, partition: int, key: int
    ) -> np.ndarray:
        """The rows of the player's entries on the board in ``partition``, in
        position order (two binary searches for the key's run; the stored board
        and player compared, so a collision of keys is never mixed in)."""
        code = self._board_codes.get(board)
        if code is None or self.rows == 0:
            return np.zeros(0, np.int64)
        k = np.uint64(key)
        first = int(np.searchsorted(self._keys, k, "left"))
        stop = int(np.searchsorted(self._keys, k, "right"))
        return self.match(code, player_id, partition, first, stop)

    def match(
        self, code: int, player_id: str, partition: int, first: int, stop: int
    ) -> np.ndarray:
        """The rows of [first, stop) (one key's run) of the player on the board
        (dictionary ``code``) in ``partition``."""
        if stop == first:
            return np.zeros(0, np.int64)
        rows = np.arange(first, stop)
        rows = rows[
            (self._partitions[first:stop] == partition)
            & (self._boards[first:stop] == code)
        ]
        want = player_id.encode()
        players = self._players
        return rows[[players.bytes_at(int(r)) == want for r in rows]]


class ContributionsIndex:
    """The index of one generation: its chain of layers."""

    def __init__(self, directory: Path, layers: Sequence[str]) -> None:
        self.layer_names = list(layers)
        self._layers = [Layer(directory / name) for name in self.layer_names]

    @property
    def rows(self) -> int:
        return sum(layer.rows for layer in self._layers)

    def contributions(
        self, board: str, player_id: str, partition: int, through: int
    ) -> list[tuple[int, dict[str, Any]]]:
        """The player's entries on the board in ``partition`` with a position up to
        ``through``, in log order: (position, body) with the body's fields as the
        history answer names them (eventId, matchId, kind, occurredAt, delta)."""
        key = key_of(board, player_id)
        out: list[tuple[int, dict[str, Any]]] = []
        for layer in self._layers:
            rows = layer.rows_of(board, player_id, partition, key)
            if len(rows) == 0:
                continue
            rows = rows[layer._positions[rows] <= through]
            if len(rows) == 0:
                continue
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            picked = layer.table.slice(lo, hi - lo)
            if hi - lo != len(rows):
                picked = layer.table.take(pa.array(rows, pa.int64()))
            columns = [picked.column(n).to_pylist() for n in BODY_COLUMNS]
            for position, event_id, match_id, kind, occurred_at, delta in zip(
                picked.column("position").to_pylist(), *columns, strict=True
            ):
                out.append(
                    (
                        position,
                        {
                            "eventId": event_id,
                            "matchId": match_id,
                            "kind": kind,
                            "occurredAt": occurred_at,
                            "delta": delta,
                        },
                    )
                )
        return out

    def last_totals(self, wanted: Sequence[tuple[str, str, int]]) -> list[int | None]:
        """The total of the newest entry of each (board, player, partition); None
        when the index has none (a writer's lookup: one batch of binary searches
        per layer, newest first).

        Rows sort by (key, board, player, partition, position), so the newest entry
        is the last row of its key's run unless another pair shares the key or
        the player has entries in a later partition: that last row is checked for
        every lookup at once (numpy and Arrow), and only the rest are searched
        row by row. A layer's writer looks up about one pair per new entry (0.8 M
        at 100 k events over 1 M players)."""
        out: list[int | None] = [None] * len(wanted)
        if not wanted:
            return out
        boards = [b for b, _, _ in wanted]
        players = pa.array([p for _, p, _ in wanted], pa.string())
        partitions = np.array([part for _, _, part in wanted], np.int64)
        keys = _keys(pa.array(boards, pa.string()), players)
        open_ = np.arange(len(wanted))
        for layer in reversed(self._layers):
            if len(open_) == 0 or layer.rows == 0:
                continue
            want = keys[open_]
            lo = np.searchsorted(layer._keys, want, "left")
            hi = np.searchsorted(layer._keys, want, "right")
            totals = layer.table.column("total").to_numpy()
            present = hi > lo
            last = np.where(present, hi - 1, 0)
            codes = np.array(
                [layer._board_codes.get(boards[i], -1) for i in open_.tolist()],
                np.int64,
            )
            same = (
                present
                & (layer._partitions[last] == partitions[open_])
                & (layer._boards[last] == codes)
            )
            if same.any():
                stored = layer.table.column("player_id").take(pa.array(last))
                wanted_players = players.take(pa.array(open_))
                same &= pc.fill_null(pc.equal(stored, wanted_players), False).to_numpy(
                    zero_copy_only=False
                )
            for i, row in zip(open_[same].tolist(), last[same].tolist(), strict=True):
                out[i] = int(totals[row])
            still = open_[~present]
            slow = ~same & present
            missed = []
            for i, first, stop, code in zip(
                open_[slow].tolist(),
                lo[slow].tolist(),
                hi[slow].tolist(),
                codes[slow].tolist(),
                strict=True,
            ):
                board, player, partition = wanted[i]
                rows = (
                    layer.match(code, player, partition, first, stop)
                    if code >= 0
                    else np.zeros(0, np.int64)
                )
                if len(rows):
                    out[i] = int(totals[int(rows[-1])])
                else:
                    missed.append(i)
            open_ = np.sort(np.concatenate([still, np.array(missed, np.int64)]))
        return out


# ------------------------------------------------------------------- writing


def chain_of(manifest: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The layers of a generation's index (oldest first: ``file``, ``rows``); None
    when the generation has none (published before it existed)."""
    entry = manifest.get(MANIFEST_KEY)
    if not isinstance(entry, Mapping):
        return None
    return [dict(layer) for layer in entry.get("layers", [])]


def load(directory: Path, manifest: Mapping[str, Any]) -> ContributionsIndex | None:
    layers = chain_of(manifest)
    if layers is None:
        return None
    return ContributionsIndex(directory, [layer["file"] for layer in layers])


def write_index(
    directory: Path,
    generation: str,
    items: Iterable[Applied] | pa.Table,
    parent: tuple[Path, Mapping[str, Any]] | None,
    compact: bool = False,
) -> dict[str, Any]:
    """Write the generation's index into ``directory`` (its temp directory) and
    return its manifest entry. ``items``: the applied items of the positions after
    the parent's boundary (every position, without a parent index); ``parent``:
    the parent generation's directory and manifest, None or without an index when
    this index starts from scratch. ``compact``: merge the whole chain into one
    layer."""
    chain: list[dict[str, Any]] = []
    index: ContributionsIndex | None = None
    if parent is not None and chain_of(parent[1]) is not None:
        chain = chain_of(parent[1]) or []
        index = load(parent[0], parent[1])
    table = layer_table(items, index)
    for layer in chain:
        os.link(parent[0] / layer["file"], directory / layer["file"])  # type: ignore[index]
    own = layer_file(generation)
    tables: list[pa.Table | None] = [None] * len(chain)
    if table.num_rows:
        chain.append({"file": own, "rows": table.num_rows})
        tables.append(table)

    def merging() -> bool:
        if len(chain) < 2:
            return False
        if compact or len(chain) > MAX_CHAIN:
            return True
        return int(chain[-2]["rows"]) <= MERGE_FACTOR * int(chain[-1]["rows"])

    while merging():
        pair = [
            t if t is not None else read_arrow(directory / layer["file"])
            for t, layer in zip(tables[-2:], chain[-2:], strict=True)
        ]
        merged = _merge(pair)
        for layer in chain[-2:]:
            if layer["file"] != own:
                (directory / layer["file"]).unlink()
        chain[-2:] = [{"file": own, "rows": merged.num_rows}]
        tables[-2:] = [merged]
    if tables and tables[-1] is not None:
        write_arrow(directory / own, tables[-1])
    return {"layers": chain, "rows": sum(int(layer["rows"]) for layer in chain)}
