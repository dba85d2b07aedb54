"""Dense live counts (speed/live.py merge_dense): the base segment's distinct scores
merged with changed base rows and changed players' live scores, against a brute
force count of the live multiset, across partitions that share values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.segments import BoardSegment, _StringColumn
from speed.live import DenseCounts, DensePart, merge_dense

pytestmark = pytest.mark.unit


def segment_of(scores: list[int]) -> BoardSegment:
    ordered = sorted(scores, reverse=True)
    return BoardSegment(
        board="b",
        players=_StringColumn(
            pa.array([f"p{i}" for i in range(len(ordered))], pa.string())
        ),
        scores=np.asarray(ordered, dtype=np.int64),
        index=np.arange(len(ordered), dtype=np.uint32),
    )


# No deadline: a loaded machine must not fail it (CI runs at load 5+).
@settings(deadline=None)
@given(
    base=st.lists(st.integers(-3, 3), max_size=12),
    data=st.data(),
    partitions=st.integers(1, 3),
)
def test_merged_counts_equal_a_brute_force_count(
    base: list[int], data: st.DataObject, partitions: int
) -> None:
    segment = segment_of(base)
    rows = list(range(len(base)))
    # Each changed base row goes to a partition; some move to a live score, some
    # leave (shadowed); new players arrive with live scores.
    changed = data.draw(st.sets(st.sampled_from(rows)) if rows else st.just(set()))
    removed: list[list[int]] = [[] for _ in range(partitions)]
    live: list[list[int]] = [[] for _ in range(partitions)]
    for row in sorted(changed):
        p = data.draw(st.integers(0, partitions - 1))
        removed[p].append(int(segment.scores[row]))
        moved = data.draw(st.none() | st.integers(-4, 4))
        if moved is not None:
            live[p].append(moved)
    for value in data.draw(st.lists(st.integers(-4, 4), max_size=5)):
        live[data.draw(st.integers(0, partitions - 1))].append(value)
    parts = [
        DensePart(0, np.asarray(r, np.int64), np.asarray(v, np.int64))
        for r, v in zip(removed, live, strict=True)
    ]
    counts = merge_dense(segment, parts)
    held = [int(segment.scores[r]) for r in rows if r not in changed]
    held += [v for vs in live for v in vs]
    for score in range(-5, 6):
        distinct = (
            segment.distinct_above(score)
            - DenseCounts.above(counts.gone, score)
            + DenseCounts.above(counts.added, score)
        )
        assert distinct == len({v for v in held if v > score}), score
        players = (
            segment.count_above(score)
            - DenseCounts.above(counts.removed, score)
            + DenseCounts.above(counts.live, score)
        )
        assert players == sum(1 for v in held if v > score), score


def test_no_base_counts_every_live_value() -> None:
    part = DensePart(0, np.zeros(0, np.int64), np.array([5, 5, 3]))
    counts = merge_dense(None, [part])
    assert DenseCounts.above(counts.added, 0) == 2
    assert DenseCounts.above(counts.live, 4) == 2
