"""The approximate rank's summed histogram (api/approx.py) against a plain count."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.approx import Histogram, TreeSizeError, tree_counts

pytestmark = pytest.mark.unit


def fenwick_bytes(counts: list[int], written: int) -> bytes:
    """The tree as apply_event.lua's BITFIELD i32 updates leave it, with only the
    first ``written`` slots present (Redis leaves later zero slots unwritten)."""
    size = len(counts)
    tree = [0] * (size + 1)
    for bucket, count in enumerate(counts, start=1):
        i = bucket
        while i <= size:
            tree[i] += count
            i += i & -i
    return np.array(tree[1 : written + 1], dtype=">i4").tobytes()


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=300), st.data())
def test_tree_counts_inverts_the_fenwick_tree(counts: list[int], data: st.DataObject):
    size = len(counts)
    written = data.draw(st.integers(0, size))
    tree = fenwick_bytes(counts, size)
    assert tree_counts(tree, size).tolist() == counts
    # Trailing slots never written read as 0: the tree of the counts truncated
    # where the stored bytes end is only equal when those slots were 0.
    short = fenwick_bytes(counts, written)
    padded = np.zeros(size, dtype=">i4")
    padded[:written] = np.frombuffer(short, dtype=">i4")
    assert np.array_equal(
        np.cumsum(tree_counts(short, size)),
        [sum(padded[j - 1] for j in _path(i)) for i in range(1, size + 1)],
    )


def _path(i: int) -> list[int]:
    slots = []
    while i > 0:
        slots.append(i)
        i -= i & -i
    return slots


def test_a_tree_larger_than_its_buckets_is_refused() -> None:
    with pytest.raises(TreeSizeError):
        tree_counts(fenwick_bytes([1, 2, 3], 3), 2)


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=40),
    st.lists(st.integers(0, 50), min_size=1, max_size=40),
    st.integers(-10, 2500),
)
def test_histogram_sums_partitions_and_counts_around_a_score(
    first: list[int], second: list[int], score: int
) -> None:
    size = max(len(first), len(second))
    first += [0] * (size - len(first))
    second += [0] * (size - len(second))
    lowers = [50 * i for i in range(size)]
    trees = [fenwick_bytes(first, size), fenwick_bytes(second, size)]
    histogram = Histogram.of((1, 2), 1, lowers, trees)
    counts = [a + b for a, b in zip(first, second, strict=True)]
    # The Lua's bucket: how many lower bounds are <= score, at least 1.
    bucket = max(1, sum(1 for low in lowers if low <= score))
    assert histogram.population == sum(counts)
    assert histogram.around(score) == (sum(counts[bucket:]), counts[bucket - 1])
