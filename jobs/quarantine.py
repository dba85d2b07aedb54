"""Quarantine thresholds: per board and cohort, the historical p99.99 of per-match
points, published with each generation (``manifest.json`` key ``quarantine``).

The cohort is the event's region (the scope a player competes in). A (board, cohort)
with fewer than ``min_samples`` contributions has no threshold: a quantile of a few
matches would hold ordinary results. Replay namespaces (``season:S@R:...``) are not
public and get none.

The quantile is exact and nearest-rank: the ``ceil(q * n)``-th smallest points of the
(board, cohort), which is what ``percentile_approx`` answers whenever its sketch is
exact (it is the rank its query targets). It is computed from a histogram, (board,
cohort, points) -> count, instead of a quantile sketch per group: points take few
distinct values (integers in a bounded range, many ties), so the histogram is a
small hash aggregate over silver and the ranks are a running sum over it. The
sketch (an object aggregate holding up to tens of thousands of samples per group,
merged and compressed across tasks) was most of the manifest phase at scale.

The histogram is also what makes the thresholds cost follow the change: each
generation keeps it (``HISTOGRAM_FILE`` in its segments directory, read only by
the next publish), and an incremental publish adds the signed counts of the
silver rows it replaced and wrote (:func:`transform_histogram_change`) instead of
aggregating every contribution again. Counts are exact integers, so the merged
histogram is the one a scan of silver would give (the incremental tests compare
the manifests' thresholds with a full publish's).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# The former percentile_approx accuracy (relative rank error 1/ACCURACY); kept for
# the equivalence test, which compares both where the sketch is exact.
ACCURACY = 100_000

# A generation's histogram, (board, cohort, points) -> contributions, in its
# segments directory; and an incremental build's change to it, in the run
# directory next to its Build (jobs/incremental.py build_path).
HISTOGRAM_FILE = "quarantine-histogram.parquet"
HISTOGRAM_KEYS = ["board", "cohort", "points"]
HISTOGRAM_SCHEMA = pa.schema(
    [
        pa.field("board", pa.string()),
        pa.field("cohort", pa.string()),
        pa.field("points", pa.int64()),
        pa.field("n", pa.int64()),
    ]
)


def _counted(contributions: DataFrame) -> DataFrame:
    """The contributions a threshold counts: not removed, not a replay's board."""
    return contributions.where(
        ~F.col("removed") & ~F.col("board").contains("@")
    ).select("board", F.col("region").alias("cohort"), "points")


def transform_histogram(contributions: DataFrame) -> DataFrame:
    """(board, cohort, points, n): how many counted contributions have those points."""
    return (
        _counted(contributions)
        .groupBy(*HISTOGRAM_KEYS)
        .agg(F.count(F.lit(1)).cast("bigint").alias("n"))
    )


def transform_histogram_change(added: DataFrame, dropped: DataFrame) -> DataFrame:
    """The histogram's change when silver loses ``dropped`` and gains ``added``
    (rows with board, region, points, removed): signed counts, zeros left out."""
    signed = _counted(added).withColumn("n", F.lit(1).cast("bigint"))
    signed = signed.unionByName(
        _counted(dropped).withColumn("n", F.lit(-1).cast("bigint"))
    )
    return (
        signed.groupBy(*HISTOGRAM_KEYS)
        .agg(F.sum("n").alias("n"))
        .where(F.col("n") != 0)
    )


def collect_histogram(frame: DataFrame) -> pa.Table:
    """A histogram DataFrame in the driver (bounded by boards x cohorts x the
    points range, whatever the number of contributions)."""
    table = frame.select(*HISTOGRAM_KEYS, "n").toArrow()
    return table.cast(HISTOGRAM_SCHEMA)


def sum_counts(*tables: pa.Table) -> pa.Table:
    """Histograms and signed changes added up by key, zero counts left out."""
    combined = pa.concat_tables([t.cast(HISTOGRAM_SCHEMA) for t in tables])
    summed = combined.group_by(HISTOGRAM_KEYS, use_threads=False).aggregate(
        [("n", "sum")]
    )
    summed = summed.rename_columns([*HISTOGRAM_KEYS, "n"])
    return summed.filter(pc.not_equal(summed["n"], 0)).cast(HISTOGRAM_SCHEMA)


def merge_histograms(histogram: pa.Table, change: pa.Table) -> pa.Table:
    """``histogram`` with ``change`` applied. A negative count would mean the
    change removed rows the histogram did not hold: the two are not of one
    silver, and the thresholds would be wrong, so it is refused."""
    merged = sum_counts(histogram, change)
    if len(merged) and pc.min(merged["n"]).as_py() < 0:
        raise ValueError("quarantine histogram: a change removed rows it did not hold")
    return merged


def save_histogram(table: pa.Table, path: Path) -> None:
    """Written whole or not at all (a rerun of a crashed publish reads it), in
    key order: the same counts give the same bytes, however they were summed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    ordered = table.cast(HISTOGRAM_SCHEMA).sort_by(
        [(k, "ascending") for k in HISTOGRAM_KEYS]
    )
    pq.write_table(ordered, tmp)
    os.replace(tmp, path)


def load_histogram(path: Path) -> pa.Table | None:
    """The histogram saved at ``path``; None when there is none (a generation
    published by older code, or one retention removed)."""
    try:
        return pq.read_table(path).cast(HISTOGRAM_SCHEMA)
    except (FileNotFoundError, pa.ArrowInvalid):
        return None


def thresholds_of(
    histogram: pa.Table, quantile: float, min_samples: int
) -> dict[str, dict[str, int]]:
    """board -> cohort -> threshold from a histogram: per (board, cohort) with at
    least ``min_samples`` contributions, the smallest points whose running count
    reaches ``ceil(quantile * samples)``: the nearest rank, as the Spark window
    over the histogram took it before (and ``percentile_approx`` where exact)."""
    ordered = histogram.sort_by(
        [("board", "ascending"), ("cohort", "ascending"), ("points", "ascending")]
    )
    boards = ordered["board"].to_pylist()
    cohorts = ordered["cohort"].to_pylist()
    points = ordered["points"].to_numpy()
    counts = ordered["n"].to_numpy()
    out: dict[str, dict[str, int]] = {}
    start = 0
    for end in range(1, len(boards) + 1):
        if end < len(boards) and (boards[end], cohorts[end]) == (
            boards[start],
            cohorts[start],
        ):
            continue
        board, cohort = boards[start], cohorts[start]
        upto = np.cumsum(counts[start:end])
        samples = int(upto[-1])
        if cohort is not None and samples >= min_samples:
            target = math.ceil(float(quantile) * float(samples))
            at = int(np.searchsorted(upto, target, side="left"))
            out.setdefault(board, {})[cohort] = int(points[start + at])
        start = end
    return {board: dict(sorted(c.items())) for board, c in sorted(out.items())}


def extract_thresholds(
    contributions: DataFrame, quantile: float, min_samples: int
) -> dict[str, dict[str, int]]:
    """board -> cohort -> threshold of silver contributions, for the manifest."""
    histogram = collect_histogram(transform_histogram(contributions))
    return thresholds_of(histogram, quantile, min_samples)


def nearest_rank(values: list[int], quantile: float) -> int:
    """The reference: the ``ceil(q * n)``-th smallest value (1-based, at least 1)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(quantile * len(ordered))) - 1]
