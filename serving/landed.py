"""The landed records index of a generation (one home: format, writer, reader).

Once an event is landed and the speed layer is rebased onto a generation whose
boundary includes it, its dedupe and contribution records leave Redis
(DESIGN.md, "Cost follows the change"); a redelivery or correction of it is answered
from this index, which the API reads and passes into the owner transaction the way
it passes base scores (speed/store.py).

An entry is one record: ``kind`` (:data:`DEDUPE` or :data:`CONTRIBUTION`), its
identity as the speed layer hashes it (speed/records.py ``identity_key``: a 64-bit
``key`` and 16 more bits, ``check``, of the hash of (playerId, eventId) or (playerId,
matchId)), ``ms`` (when the record was last written, receivedAtMs: what the dedupe
window runs from) and ``value``, the record's bytes exactly as Redis held them. The
index of a generation is a chain of layers, oldest first, each an Arrow IPC file
(:func:`serving.files.write_arrow`) holding the records one or more generations
landed, sorted by (kind, key, check), one entry per identity::

    landed.<gen>.arrow     columns kind u8, key u64, check u16, ms i64, value binary

A later layer's entry replaces an earlier one of the same identity (newest wins: a
correction rewrites its match's contribution record). Like layered segments
(serving/layers.py) a generation hard-links its parent's layer files into its own
directory, so each generation directory is self-contained and retention needs nothing
more; the manifest names the chain (``"landed": {"layers": [...], "entries": n}``).
A generation that could write no complete index because landed records within the
record lifetime predate the contribution value (``rc``) says until when they were
received instead (``"landed": {"unindexedThroughMs": t}``): until ``t`` leaves the
lifetime, the next publish knows without reading the log that it cannot write one
either.
:func:`compact_layers` merges a chain into one layer and drops the records last
written before the dedupe window (Redis expired those too).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from serving.files import read_arrow, write_arrow

DEDUPE = 0
CONTRIBUTION = 1
KINDS = (DEDUPE, CONTRIBUTION)

SCHEMA = pa.schema(
    [
        ("kind", pa.uint8()),
        ("key", pa.uint64()),
        ("check", pa.uint16()),
        ("ms", pa.int64()),
        ("value", pa.binary()),
    ]
)
# A chain longer than this is merged into one layer by the next publish (a lookup
# reads every layer of the chain, newest first).
MAX_CHAIN = 8


def layer_file(generation: str) -> str:
    return f"landed.{generation}.arrow"


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of a layer (writers build layers from these)."""

    kind: int
    key: int
    check: int
    ms: int
    value: bytes


def _table(kind: Any, key: Any, check: Any, ms: Any, value: Any) -> pa.Table:
    return pa.table(
        [
            pa.array(kind, pa.uint8()),
            pa.array(key, pa.uint64()),
            pa.array(check, pa.uint16()),
            pa.array(ms, pa.int64()),
            pa.array(value, pa.binary()),
        ],
        schema=SCHEMA,
    )


def _newest(table: pa.Table, rank: np.ndarray, cutoff_ms: int | None) -> pa.Table:
    """One row per (kind, key, check): the highest ``rank`` (later wins), sorted;
    rows last written before ``cutoff_ms`` dropped (after the newest was chosen, so
    an old entry does not come back when its newer one expires)."""
    if table.num_rows == 0:
        return table
    kind = table.column("kind").to_numpy()
    key = table.column("key").to_numpy()
    check = table.column("check").to_numpy()
    # Last key of lexsort is the primary one: (kind, key, check), then rank.
    order = np.lexsort((rank, check, key, kind))
    k, y, c = kind[order], key[order], check[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (k[1:] != k[:-1]) | (y[1:] != y[:-1]) | (c[1:] != c[:-1])
    chosen = order[last]
    if cutoff_ms is not None:
        ms = table.column("ms").to_numpy()[chosen]
        chosen = chosen[ms >= cutoff_ms]
    return table.take(pa.array(chosen, pa.int64()))


def layer_table(entries: Iterable[Entry]) -> pa.Table:
    """A layer's rows from entries in write order (a later entry of the same
    identity replaces an earlier one)."""
    rows = list(entries)
    table = _table(
        [e.kind for e in rows],
        [e.key for e in rows],
        [e.check for e in rows],
        [e.ms for e in rows],
        [e.value for e in rows],
    )
    return _newest(table, np.arange(len(rows), dtype=np.int64), None)


def write_layer(path: Path, entries: Iterable[Entry]) -> tuple[str, int]:
    """Write one layer; returns (sha256, entries)."""
    table = layer_table(entries)
    return write_arrow(path, table), table.num_rows


def compact_layers(
    directory: Path, layers: Sequence[str], out: Path, cutoff_ms: int | None
) -> tuple[str, int]:
    """Merge a chain (oldest first) into one layer at ``out``: newest wins, records
    last written before ``cutoff_ms`` dropped. Returns (sha256, entries)."""
    tables = [read_arrow(directory / name) for name in layers]
    ranks = [np.full(t.num_rows, i, dtype=np.int64) for i, t in enumerate(tables)]
    table = (
        pa.concat_tables(tables) if tables else _table([], [], [], [], [])
    ).combine_chunks()
    rank = np.concatenate(ranks) if ranks else np.zeros(0, dtype=np.int64)
    merged = _newest(table, rank, cutoff_ms)
    return write_arrow(out, merged), merged.num_rows


class Layer:
    """One mapped layer: per kind, its sorted keys and checks (numpy views of the
    memory-mapped file) and the values."""

    def __init__(self, path: Path) -> None:
        table = read_arrow(path)
        self.rows = table.num_rows
        kind = table.column("kind").to_numpy()
        self._keys = table.column("key").to_numpy()
        self._checks = table.column("check").to_numpy()
        self._ms = table.column("ms").to_numpy()
        self._values = table.column("value")
        # Rows of each kind are one run (sorted by kind first).
        bounds = np.searchsorted(kind, np.array(KINDS + (len(KINDS),), np.uint8))
        self._runs = {
            k: (int(bounds[i]), int(bounds[i + 1])) for i, k in enumerate(KINDS)
        }

    def find(self, kind: int, keys: np.ndarray, checks: np.ndarray) -> np.ndarray:
        """Row of each (key, check) in this layer, -1 when absent."""
        first, stop = self._runs[kind]
        found = np.full(len(keys), -1, dtype=np.int64)
        if stop == first or len(keys) == 0:
            return found
        run = self._keys[first:stop]
        at = np.searchsorted(run, keys)
        inside = at < len(run)
        rows = first + np.where(inside, at, 0)
        hit = inside & (self._keys[rows] == keys)
        match = hit & (self._checks[rows] == checks)
        found[match] = rows[match]
        # Same 64-bit key, other check (about 2**-64 per pair): walk the equal keys.
        for i in np.nonzero(hit & ~match)[0]:
            row = int(rows[i])
            while row < stop and self._keys[row] == keys[i]:
                if self._checks[row] == checks[i]:
                    found[i] = row
                    break
                row += 1
        return found

    def value(self, row: int) -> bytes:
        return self._values[row].as_py()

    def ms(self, row: int) -> int:
        return int(self._ms[row])


class LandedIndex:
    """The index of one generation: its chain of layers, read newest first."""

    def __init__(self, directory: Path, layers: Sequence[str]) -> None:
        self.layer_names = list(layers)
        self._layers = [Layer(directory / name) for name in reversed(self.layer_names)]

    @property
    def entries(self) -> int:
        return sum(layer.rows for layer in self._layers)

    def lookup(
        self,
        kind: int,
        keys: Sequence[int] | np.ndarray,
        checks: Sequence[int] | np.ndarray,
    ) -> list[bytes | None]:
        """The value of each (key, check), None when the index has none; vectorised
        per layer (one binary search of the batch per layer)."""
        want_keys = np.asarray(keys, dtype=np.uint64)
        want_checks = np.asarray(checks, dtype=np.uint16)
        out: list[bytes | None] = [None] * len(want_keys)
        open_ = np.arange(len(want_keys))
        for layer in self._layers:
            if len(open_) == 0:
                break
            rows = layer.find(kind, want_keys[open_], want_checks[open_])
            hit = rows >= 0
            for i, row in zip(open_[hit].tolist(), rows[hit].tolist(), strict=True):
                out[i] = layer.value(row)
            open_ = open_[~hit]
        return out

    def get(self, kind: int, key: int, check: int) -> bytes | None:
        return self.lookup(kind, [key], [check])[0]


def chain_of(manifest: Mapping[str, Any]) -> list[str] | None:
    """The layers of a generation's index (oldest first); None when the generation
    has no index (published before it existed, or by a build that wrote none)."""
    landed = manifest.get("landed")
    if not isinstance(landed, Mapping) or "layers" not in landed:
        return None
    return [str(name) for name in landed["layers"]]


def unindexed_through(manifest: Mapping[str, Any]) -> int | None:
    """When the newest landed record without a contribution value that kept a
    generation from writing an index was received (ms); None when not named."""
    landed = manifest.get("landed")
    if not isinstance(landed, Mapping) or "unindexedThroughMs" not in landed:
        return None
    return int(landed["unindexedThroughMs"])


def link_chain(source: Path, target: Path, layers: Sequence[str]) -> None:
    """Hard-link a parent's layer files into a new generation's directory."""
    for name in layers:
        os.link(source / name, target / name)


def manifest_entry(layers: Sequence[str], entries: int) -> dict[str, Any]:
    return {"layers": list(layers), "entries": int(entries)}


def unindexed_entry(through_ms: int) -> dict[str, Any]:
    """The manifest entry of a generation without an index (see
    :func:`unindexed_through`)."""
    return {"unindexedThroughMs": int(through_ms)}
