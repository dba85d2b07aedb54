"""speed.live.RowCounts (every partition's rows before a global row, from a block
table) equals PartitionRows.count_before, the searchsorted it replaces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed.baserows import PartitionRows
from speed.live import ROW_BLOCK, RowCounts

pytestmark = pytest.mark.unit


def partition_rows(owner: list[int], partitions: int) -> PartitionRows:
    owners = np.array(owner, dtype=np.int64)
    rows = tuple(np.flatnonzero(owners == p) for p in range(partitions))
    local = np.zeros(len(owner), dtype=np.int64)
    for p_rows in rows:
        local[p_rows] = np.arange(len(p_rows))
    empty = np.zeros(0, dtype=np.int64)
    return PartitionRows(partitions, owners, local, rows, empty.astype("S1"), empty)


@settings(deadline=None, max_examples=60)
@given(
    st.integers(min_value=1, max_value=9).flatmap(
        lambda p: st.tuples(
            st.just(p),
            # Around and across block edges: up to three blocks of rows.
            st.lists(
                st.integers(min_value=0, max_value=p - 1), max_size=3 * ROW_BLOCK + 5
            ),
        )
    )
)
def test_rows_before_equal_count_before(case: tuple[int, list[int]]) -> None:
    partitions, owner = case
    rows = partition_rows(owner, partitions)
    counts = RowCounts(rows)
    edges = {0, len(owner)} | {
        r
        for k in range(len(owner) // ROW_BLOCK + 1)
        for r in (k * ROW_BLOCK - 1, k * ROW_BLOCK, k * ROW_BLOCK + 1)
        if 0 <= r <= len(owner)
    }
    for row in sorted(edges | set(range(0, len(owner) + 1, 7))):
        want = [rows.count_before(p, row) for p in range(partitions)]
        assert counts.before(row) == want
