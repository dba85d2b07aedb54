"""Partition-local base rows (speed/baserows.py): the vectorized crc32 is zlib's,
and local rows number each partition's players in display order."""

from __future__ import annotations

import zlib
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.segments import BoardSegment, _StringColumn
from speed import baserows
from speed.baserows import build_partition_rows, crc32_column
from speed.partitions import partition_of

pytestmark = pytest.mark.unit

ids = st.lists(st.text(min_size=0, max_size=24), min_size=0, max_size=60, unique=True)
# What an accepted playerId can be (speed/events.py normalize_id): never a NUL.
id_text = st.text(
    alphabet=st.one_of(
        st.characters(categories=("L", "Nd")), st.sampled_from(list("_-.:"))
    ),
    min_size=1,
    max_size=24,
)
valid_ids = st.lists(id_text, max_size=60, unique=True)


@settings(deadline=None)
@given(ids)
def test_crc32_column_equals_zlib(players: list[str]) -> None:
    column = _StringColumn(pa.array(players, pa.string()))
    got = crc32_column(column.offsets, column.data)
    want = [zlib.crc32(p.encode("utf-8")) for p in players]
    assert got.tolist() == want


@settings(deadline=None)
@given(ids, st.integers(min_value=1, max_value=9))
def test_local_rows_follow_display_order_per_partition(
    players: list[str], partitions: int
) -> None:
    segment = BoardSegment(
        board="b",
        players=_StringColumn(pa.array(players, pa.string())),
        scores=np.arange(len(players), 0, -1, dtype=np.int64),
        index=np.argsort(np.array([p.encode() for p in players], dtype=object)),
    )
    rows = build_partition_rows(segment, partitions)
    seen = [0] * partitions
    for row, player in enumerate(players):
        p = partition_of(player, partitions)
        assert rows.owner[row] == p
        assert rows.local_row(row) == seen[p]
        assert rows.global_row(p, seen[p]) == row
        seen[p] += 1
    for p in range(partitions):
        # Rows of p before global row r: a prefix of p's local rows.
        for r in range(len(players) + 1):
            expected = sum(
                1 for i in range(r) if partition_of(players[i], partitions) == p
            )
            assert rows.count_before(p, r) == expected


@settings(deadline=None)
@given(valid_ids, st.lists(id_text, max_size=20))
def test_batch_lookup_equals_row_of(players: list[str], probes: list[str]) -> None:
    segment = BoardSegment(
        board="b",
        players=_StringColumn(pa.array(players, pa.string())),
        scores=np.arange(len(players), 0, -1, dtype=np.int64),
        index=np.array(
            sorted(range(len(players)), key=lambda i: players[i].encode()),
            dtype=np.int64,
        ),
    )
    rows = build_partition_rows(segment, 3)
    asked = [*players, *probes]
    want = []
    for player in asked:
        row = segment.row_of(player)
        want.append(-1 if row is None else rows.local_row(row))
    assert rows.local_rows_of(asked) == want


@settings(deadline=None)
@given(valid_ids, st.integers(min_value=1, max_value=9), st.integers(1, 5))
def test_chunked_derivations_equal_whole_ones(
    players: list[str], partitions: int, chunk: int
) -> None:
    """The derivations run CHUNK_ROWS rows at a time (bounded memory at 100 M
    players): any chunk size gives what one chunk gives."""
    order = sorted(range(len(players)), key=lambda i: players[i].encode())
    segment = BoardSegment(
        board="b",
        players=_StringColumn(pa.array(players, pa.string())),
        scores=np.arange(len(players), 0, -1, dtype=np.int64),
        index=np.array(order, dtype=np.int64),
    )
    whole = build_partition_rows(segment, partitions)
    with patch.object(baserows, "CHUNK_ROWS", chunk):
        chunked = build_partition_rows(segment, partitions)
        crc = crc32_column(segment.players.offsets, segment.players.data)
    assert crc.tolist() == [zlib.crc32(p.encode("utf-8")) for p in players]
    assert chunked.owner.tolist() == whole.owner.tolist()
    assert chunked.local.tolist() == whole.local.tolist()
    assert [r.tolist() for r in chunked.rows] == [r.tolist() for r in whole.rows]
    assert chunked.sorted_ids.tolist() == whole.sorted_ids.tolist()
    # The ids in id order (NUL-padded to the longest; numpy reads the pad off).
    assert chunked.sorted_ids.tolist() == [players[i].encode() for i in order]
