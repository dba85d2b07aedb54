"""Where the full recompute's time goes: computing contributions, writing them to
Delta, reading them back for the totals; and what session settings change it.

    python -m bench.publish --players 100000 --events 1000000 --no-duckdb \
        --data-dir /tmp/lb-ab --keep
    python -m bench.silver_write_ab --data-dir /tmp/lb-ab --rounds 2 \
        --variants base,nodict,lz4

Per round, alternating the variants in one Spark session (so the machine's load hits
all alike): the working tree's contributions of all of bronze written to a ``noop``
sink (``compute``), then, per variant, written to a new Delta table the way
``jobs.build.load_silver`` writes ``silver_contributions`` (``write``: compute +
write), and the totals of that table (``totals``: read back + aggregate, ``noop``
sink). Each is timed with the driver's wall clock and the driver JVM's CPU time
(local mode: the tasks'). A variant is a set of session settings applied around
its write and read (see ``VARIANTS``); the written tables are compared with the
first variant's (row counts and ``exceptAll`` of the totals).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.harness import loadavg_text
from bench.recompute_ab import contributions_of, log_boundary, task_cpu_ms, timed

# Session settings per variant (SQLConf entries reach the Parquet writer's Hadoop
# configuration: Spark copies them into it for every write).
VARIANTS: dict[str, dict[str, str]] = {
    "base": {},
    "base_again": {},  # the first variant once more: JIT warm-up and drift
    # No dictionary pages: player_id / match_id are nearly unique per row group,
    # so the writer fills a dictionary, gives up and rewrites the page plain.
    "nodict": {"parquet.enable.dictionary": "false"},
    "nodict_ids": {
        "parquet.enable.dictionary#player_id": "false",
        "parquet.enable.dictionary#match_id": "false",
    },
    "lz4": {"spark.sql.parquet.compression.codec": "lz4_raw"},
    "zstd": {"spark.sql.parquet.compression.codec": "zstd"},
    "plain": {"spark.sql.parquet.compression.codec": "uncompressed"},
    # Delta statistics (min/max/nulls) on the first 4 columns instead of 32.
    "stats4": {
        "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "4"
    },
    # No min/max statistics at all (the row count stays in the log).
    "stats0": {
        "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "0"
    },
    "stats4_nodict_ids": {
        "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "4",
        "parquet.enable.dictionary#player_id": "false",
        "parquet.enable.dictionary#match_id": "false",
    },
    "shuffle8": {"spark.sql.shuffle.partitions": "8"},
    "shuffle16": {"spark.sql.shuffle.partitions": "16"},
    "shuffle2": {"spark.sql.shuffle.partitions": "2"},
    "noaqe": {"spark.sql.adaptive.enabled": "false"},
    # Not a setting: the totals "in the same pass" (issue 24's other untried lever).
    # The contributions are persisted on the executors' disk while the write
    # computes them, and the totals aggregate that copy instead of reading the
    # written table back (Spark writes one output per job, so a copy is the only
    # way to hand one computation to two).
    "same_pass": {},
}
# Variants whose contributions are persisted for the totals (above).
SAME_PASS = {"same_pass"}


def with_conf(spark: SparkSession, conf: dict[str, str]) -> dict[str, str | None]:
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    return old


def restore(spark: SparkSession, old: dict[str, str | None]) -> None:
    for k, v in old.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="base,nodict")
    ap.add_argument("--no-compute", action="store_true", help="skip the noop run")
    ap.add_argument(
        "--log-partitions",
        type=int,
        default=None,
        help="only bronze's log partitions below this (a smaller, quicker sample)",
    )
    args = ap.parse_args()
    names = args.variants.split(",")

    from conf.boards import load_boards
    from conf.rules import default_registry
    from jobs import recompute
    from jobs.recompute import transform_totals
    from jobs.spark import get_spark

    boards = load_boards()
    spark = get_spark("bench-silver-write-ab")
    delta = args.data_dir / "lb" / "delta"
    bronze = spark.read.format("delta").load(str(delta / "bronze_events"))
    if args.log_partitions is not None:
        bronze = bronze.where(F.col("partition") < args.log_partitions)
    boundary = log_boundary(bronze)
    registry = default_registry()
    out = Path(tempfile.mkdtemp(prefix="silver-ab-"))

    def contributions() -> DataFrame:
        return contributions_of(recompute, bronze, boundary, boards, registry)

    report: dict = {"variants": names, "load_start": loadavg_text(), "rounds": []}
    for _ in range(args.rounds):
        row: dict = {}
        if not args.no_compute:
            row["compute"] = timed(spark, contributions())
        for name in names:
            old = with_conf(spark, VARIANTS[name])
            try:
                path = out / name
                shutil.rmtree(path, ignore_errors=True)
                before = task_cpu_ms(spark)
                started = time.perf_counter()
                rows = contributions()
                if name in SAME_PASS:
                    rows = rows.persist(StorageLevel.DISK_ONLY)
                (
                    rows.withColumn("generation", F.lit("g1"))
                    .write.format("delta")
                    .mode("overwrite")
                    .partitionBy("partition")
                    .save(str(path))
                )
                row[f"write_{name}"] = {
                    "wall_s": round(time.perf_counter() - started, 2),
                    "cpu_s": round((task_cpu_ms(spark) - before) / 1000, 2),
                    "mb": round(
                        sum(f.stat().st_size for f in path.rglob("*.parquet")) / 2**20,
                        1,
                    ),
                }
                if name in SAME_PASS:
                    row[f"totals_{name}"] = timed(spark, transform_totals(rows))
                    rows.unpersist(blocking=True)
                else:
                    silver = (
                        spark.read.format("delta").load(str(path)).drop("generation")
                    )
                    row[f"totals_{name}"] = timed(spark, transform_totals(silver))
            finally:
                restore(spark, old)
        row["load"] = loadavg_text()
        print(json.dumps(row), flush=True)
        report["rounds"].append(row)
    first = spark.read.format("delta").load(str(out / names[0])).drop("generation")
    report["rows"] = {"bronze": bronze.count(), names[0]: first.count()}
    for name in names[1:]:
        other = spark.read.format("delta").load(str(out / name)).drop("generation")
        report[f"diff_{name}"] = (
            first.exceptAll(other).count(),
            other.exceptAll(first).count(),
        )
    report["load_end"] = loadavg_text()
    spark.stop()
    shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
