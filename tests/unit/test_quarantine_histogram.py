"""The quarantine histogram in the driver: thresholds from it are the nearest-rank
reference per (board, cohort), and a histogram plus a change (rows out, rows in) is
the histogram of the changed rows, as an incremental publish relies on."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.quarantine import (
    HISTOGRAM_SCHEMA,
    merge_histograms,
    nearest_rank,
    sum_counts,
    thresholds_of,
)

pytestmark = pytest.mark.unit

Row = tuple[str, str | None, int]  # board, cohort, points

rows_strategy = st.lists(
    st.tuples(
        st.sampled_from(["b1", "b2", "b3"]),
        st.sampled_from(["eu", "na", None]),
        st.integers(0, 12),
    ),
    max_size=80,
)


def histogram(rows: list[Row], sign: int = 1) -> pa.Table:
    counts = Counter(rows)
    return pa.table(
        {
            "board": [k[0] for k in counts],
            "cohort": [k[1] for k in counts],
            "points": [k[2] for k in counts],
            "n": [sign * n for n in counts.values()],
        },
        schema=HISTOGRAM_SCHEMA,
    )


def reference(rows: list[Row], quantile: float, min_samples: int) -> dict:
    groups: dict[tuple[str, str], list[int]] = {}
    for board, cohort, points in rows:
        if cohort is not None:
            groups.setdefault((board, cohort), []).append(points)
    out: dict[str, dict[str, int]] = {}
    for (board, cohort), values in groups.items():
        if len(values) >= min_samples:
            out.setdefault(board, {})[cohort] = nearest_rank(values, quantile)
    return {b: dict(sorted(c.items())) for b, c in sorted(out.items())}


@settings(max_examples=200, deadline=None)
@given(
    rows=rows_strategy,
    quantile=st.sampled_from([0.0, 0.01, 0.5, 0.9, 0.9999, 1.0]),
    min_samples=st.integers(1, 6),
)
def test_thresholds_are_the_nearest_rank(
    rows: list[Row], quantile: float, min_samples: int
) -> None:
    assert thresholds_of(histogram(rows), quantile, min_samples) == reference(
        rows, quantile, min_samples
    )


@settings(max_examples=200, deadline=None)
@given(rows=rows_strategy, data=st.data())
def test_a_change_gives_the_changed_rows_histogram(
    rows: list[Row], data: st.DataObject
) -> None:
    # Silver loses some of its rows (a corrected match's old ones) and gains others.
    mask = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    dropped = [row for row, out in zip(rows, mask, strict=True) if out]
    kept = [row for row, out in zip(rows, mask, strict=True) if not out]
    added = data.draw(rows_strategy)
    # The change as the incremental publish computes it: one signed table.
    change = sum_counts(histogram(added), histogram(dropped, -1))
    merged = merge_histograms(histogram(rows), change)
    expected = histogram(kept + added)

    def as_counter(table: pa.Table) -> Counter:
        d = table.to_pydict()
        keys = zip(d["board"], d["cohort"], d["points"], strict=True)
        return Counter(dict(zip(keys, d["n"], strict=True)))

    assert as_counter(merged) == as_counter(expected)
    assert all(n > 0 for n in merged["n"].to_pylist())  # zeros are left out


def test_a_change_removing_what_is_not_there_is_refused() -> None:
    with pytest.raises(ValueError, match="did not hold"):
        merge_histograms(histogram([("b1", "eu", 3)]), histogram([("b1", "eu", 4)], -1))
