"""Quarantine thresholds from a histogram equal the former ``percentile_approx``
ones (exact at these sizes) and the nearest-rank reference, group by group."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.quarantine import ACCURACY, extract_thresholds, nearest_rank

pytestmark = pytest.mark.integration


def sketch_thresholds(
    contributions: DataFrame, quantile: float, min_samples: int
) -> dict[str, dict[str, int]]:
    """The former implementation: a percentile_approx sketch per (board, cohort)."""
    kept = contributions.where(~F.col("removed") & ~F.col("board").contains("@"))
    rows = (
        kept.groupBy("board", F.col("region").alias("cohort"))
        .agg(
            F.percentile_approx("points", quantile, ACCURACY).alias("threshold"),
            F.count(F.lit(1)).alias("samples"),
        )
        .where(F.col("samples") >= min_samples)
        .collect()
    )
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        if row["cohort"] is not None:
            out.setdefault(row["board"], {})[row["cohort"]] = int(row["threshold"])
    return out


def test_histogram_thresholds_equal_sketch_and_reference(spark: SparkSession) -> None:
    rng = np.random.default_rng(7)
    rows = []
    for g in range(30):
        board = f"season:S{g}:global" if g % 7 else f"season:S{g}@v2:global"
        for region in ("eu", "na", None):
            n = int(rng.integers(1, 2500))
            spread = int(rng.choice([3, 60, 5000]))
            points = rng.integers(0, spread, n)
            removed = rng.random(n) < 0.05
            rows += [
                (board, region, int(p), bool(r))
                for p, r in zip(points, removed, strict=True)
            ]
    frame = spark.createDataFrame(
        rows, "board string, region string, points bigint, removed boolean"
    ).repartition(3)
    for quantile, min_samples in ((0.9999, 1), (0.9, 100), (0.5, 1000), (0.01, 1)):
        ours = extract_thresholds(frame, quantile, min_samples)
        assert ours == sketch_thresholds(frame, quantile, min_samples)
        expected: dict[str, dict[str, int]] = {}
        groups: dict[tuple[str, str], list[int]] = {}
        for board, region, points, removed in rows:
            if not removed and "@" not in board and region is not None:
                groups.setdefault((board, region), []).append(points)
        for (board, region), values in groups.items():
            if len(values) >= min_samples:
                expected.setdefault(board, {})[region] = nearest_rank(values, quantile)
        assert ours == expected
        assert ours  # the case has groups above min_samples
