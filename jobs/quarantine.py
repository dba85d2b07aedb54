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
"""

from __future__ import annotations

import math

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

# The former percentile_approx accuracy (relative rank error 1/ACCURACY); kept for
# the equivalence test, which compares both where the sketch is exact.
ACCURACY = 100_000


def transform_thresholds(
    contributions: DataFrame, quantile: float, min_samples: int
) -> DataFrame:
    """(board, cohort, threshold, samples) from silver contributions."""
    kept = contributions.where(~F.col("removed") & ~F.col("board").contains("@"))
    histogram = kept.groupBy("board", F.col("region").alias("cohort"), "points").agg(
        F.count(F.lit(1)).alias("n")
    )
    group = Window.partitionBy("board", "cohort")
    upto = group.orderBy("points").rowsBetween(Window.unboundedPreceding, 0)
    ranked = histogram.select(
        "board",
        "cohort",
        "points",
        F.sum("n").over(upto).alias("upto"),
        F.sum("n").over(group).alias("samples"),
    )
    # ceil(q * n) in double precision, as the sketch's query computes its rank.
    target = F.ceil(F.lit(float(quantile)) * F.col("samples").cast("double"))
    return (
        ranked.where(F.col("samples") >= min_samples)
        .where(F.col("upto") >= target)
        .groupBy("board", "cohort")
        .agg(
            F.min("points").alias("threshold"),
            F.first("samples").alias("samples"),
        )
    )


def nearest_rank(values: list[int], quantile: float) -> int:
    """The reference: the ``ceil(q * n)``-th smallest value (1-based, at least 1)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(quantile * len(ordered))) - 1]


def extract_thresholds(
    contributions: DataFrame, quantile: float, min_samples: int
) -> dict[str, dict[str, int]]:
    """board -> cohort -> threshold, for the manifest (a small map)."""
    out: dict[str, dict[str, int]] = {}
    rows = transform_thresholds(contributions, quantile, min_samples).collect()
    for row in rows:
        if row["cohort"] is None:
            continue
        out.setdefault(row["board"], {})[row["cohort"]] = int(row["threshold"])
    return {board: dict(sorted(c.items())) for board, c in sorted(out.items())}
