"""Paired A/B timings of two publish steps on a kept ``bench.publish`` data directory:
quarantine thresholds (percentile sketch vs histogram) and first acceptance by
(player, eventId) (window sort vs hash aggregate + broadcast of the repeats).

    python -m bench.publish --players 20000 --events 200000 --no-duckdb \
        --data-dir /tmp/lb-ab --keep
    python -m bench.publish_ab --data-dir /tmp/lb-ab --rounds 3

Variants alternate within a round in one Spark session, so the machine's load
hits both alike; each also checks that both variants give the same answer.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from bench.harness import loadavg_text


def sketch_thresholds(contributions: DataFrame, quantile: float, min_samples: int):
    """The former jobs/quarantine.py: a percentile_approx sketch per group."""
    kept = contributions.where(~F.col("removed") & ~F.col("board").contains("@"))
    return (
        kept.groupBy("board", F.col("region").alias("cohort"))
        .agg(
            F.percentile_approx("points", quantile, 100_000).alias("threshold"),
            F.count(F.lit(1)).alias("samples"),
        )
        .where(F.col("samples") >= min_samples)
    )


def window_first(events: DataFrame) -> DataFrame:
    """The former transform_first_acceptance: row_number over a full sort."""
    first = Window.partitionBy("player_id", "event_id").orderBy("position")
    return (
        events.withColumn("_n", F.row_number().over(first))
        .where(F.col("_n") == 1)
        .drop("_n")
    )


def timed(frame: DataFrame) -> float:
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return round(time.perf_counter() - started, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quantile", type=float, default=0.9999)
    ap.add_argument("--min-samples", type=int, default=1000)
    args = ap.parse_args()

    from jobs.quarantine import extract_thresholds, transform_histogram
    from jobs.recompute import NARROW, transform_first_acceptance, with_record_columns
    from jobs.spark import get_spark

    spark = get_spark("bench-publish-ab")
    delta = args.data_dir / "lb" / "delta"
    silver = spark.read.format("delta").load(str(delta / "silver_contributions"))
    bronze = with_record_columns(
        spark.read.format("delta").load(str(delta / "bronze_events"))
    ).select(*NARROW)
    events = bronze.repartition("player_id")
    q, n = args.quantile, args.min_samples
    sketch = sketch_thresholds(silver, q, n)
    # The histogram's Spark aggregate (the thresholds are then taken from it in
    # the driver, jobs/quarantine.py thresholds_of).
    histogram = transform_histogram(silver)
    sketched: dict[str, dict[str, int]] = {}
    for row in sketch.where(F.col("cohort").isNotNull()).collect():
        sketched.setdefault(row["board"], {})[row["cohort"]] = int(row["threshold"])
    report: dict = {
        "silver_rows": silver.count(),
        "bronze_rows": bronze.count(),
        "thresholds_equal": {
            b: dict(sorted(c.items())) for b, c in sorted(sketched.items())
        }
        == extract_thresholds(silver, q, n),
        # Without ``scores`` (a map: no set operations on it; null here anyway).
        "first_equal": window_first(events)
        .drop("scores")
        .exceptAll(transform_first_acceptance(events).drop("scores"))
        .count()
        == 0
        and window_first(events).count() == transform_first_acceptance(events).count(),
        "load_start": loadavg_text(),
        "rounds": [],
    }
    for _ in range(args.rounds):
        report["rounds"].append(
            {
                "thresholds_sketch_s": timed(sketch),
                "thresholds_histogram_s": timed(histogram),
                "first_window_s": timed(window_first(events)),
                "first_aggregate_s": timed(transform_first_acceptance(events)),
                "load": loadavg_text(),
            }
        )
    spark.stop()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
