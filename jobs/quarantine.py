"""Quarantine thresholds: per board and cohort, the historical p99.99 of per-match
points, published with each generation (``manifest.json`` key ``quarantine``).

The cohort is the event's region (the scope a player competes in). A (board, cohort)
with fewer than ``min_samples`` contributions has no threshold: a quantile of a few
matches would hold ordinary results. Replay namespaces (``season:S@R:...``) are not
public and get none.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# percentile_approx's accuracy: relative error 1/ACCURACY of the rank.
ACCURACY = 100_000


def transform_thresholds(
    contributions: DataFrame, quantile: float, min_samples: int
) -> DataFrame:
    """(board, cohort, threshold, samples) from silver contributions."""
    kept = contributions.where(~F.col("removed") & ~F.col("board").contains("@"))
    return (
        kept.groupBy("board", F.col("region").alias("cohort"))
        .agg(
            F.percentile_approx("points", quantile, ACCURACY).alias("threshold"),
            F.count(F.lit(1)).alias("samples"),
        )
        .where(F.col("samples") >= min_samples)
    )


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
