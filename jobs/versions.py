"""Each (board, player)'s version at a generation's boundary, for its serving segment.

The speed layer counts a version per pair (every applied change adds one) and every
log record's result carries the total and version each board had after it, so the
version at the boundary is the largest one the landed log gave the pair (versions
only grow). The segment keeps it beside the score: a player unchanged since the
generation then needs no per-board state in Redis to keep counting (issue 11,
"only deltas in Redis"; speed/rebase.py drops it, the owner transaction takes it
from the segment).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.land import table_exists
from jobs.recompute import transform_within_boundary

# Only what the version needs from a log record (bronze ``raw`` is the record).
RESULT_BOARDS = (
    "struct<result: struct<boards: array<struct<board: string, version: bigint>>>>"
)


def transform_versions(bronze: DataFrame) -> DataFrame:
    """(board, player_id, version) from bronze rows: the largest per pair."""
    record = F.from_json(F.col("raw"), RESULT_BOARDS)
    return (
        bronze.select(
            F.col("player_id"), F.explode(record["result"]["boards"]).alias("item")
        )
        .select(
            F.col("item.board").alias("board"),
            "player_id",
            F.col("item.version").alias("version"),
        )
        .groupBy("board", "player_id")
        .agg(F.max("version").alias("version"))
    )


def with_versions(
    spark: SparkSession,
    rows: DataFrame,
    bronze_path: Path,
    boundary: Mapping[int, int],
) -> DataFrame:
    """``rows`` (gold rows of boards) with each pair's ``version`` at ``boundary``
    (null when the log never named the pair: the segment writes 0)."""
    if not table_exists(bronze_path):
        return rows.withColumn("version", F.lit(None).cast("bigint"))
    bronze = spark.read.format("delta").load(str(bronze_path))
    versions = transform_versions(
        transform_within_boundary(bronze, boundary).select("player_id", "raw")
    )
    return rows.join(versions, ["board", "player_id"], "left")
