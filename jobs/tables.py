"""The batch layer's Delta tables a publish writes, and its gold tables' rows.

``silver_contributions`` / ``silver_totals`` hold the latest recompute,
``gold_snapshots`` every published generation's ranked rows, ``gold_manifest`` one
row per published generation (the exact ``manifest.json`` text, for repair).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import DEFAULT_GAME, GAME_SEP
from jobs.land import table_exists

SILVER_CONTRIBUTIONS = "silver_contributions"
SILVER_TOTALS = "silver_totals"
GOLD_SNAPSHOTS = "gold_snapshots"
GOLD_MANIFEST = "gold_manifest"

GOLD_COLUMNS = ["board", "position", "rank", "player_id", "score", "achieved_ms"]

MANIFEST_SCHEMA = T.StructType(
    [
        T.StructField("generation", T.StringType(), False),
        T.StructField("generation_number", T.LongType(), False),
        T.StructField("boundary", T.MapType(T.StringType(), T.LongType()), False),
        T.StructField("board_count", T.LongType(), False),
        T.StructField("populations", T.MapType(T.StringType(), T.LongType()), False),
        T.StructField("checksums", T.MapType(T.StringType(), T.StringType()), False),
        T.StructField("published_at", T.TimestampType(), False),
        T.StructField("complete", T.BooleanType(), False),
        T.StructField("manifest_json", T.StringType(), False),
    ]
)


@dataclass(frozen=True, slots=True)
class PublishedRow:
    generation: str
    number: int
    manifest_json: str


def extract_published(spark: SparkSession, path: Path) -> list[PublishedRow]:
    if not table_exists(path):
        return []
    rows = (
        spark.read.format("delta")
        .load(str(path))
        .where(F.col("complete"))
        .select("generation", "generation_number", "manifest_json")
        .collect()
    )
    return sorted(
        (PublishedRow(r[0], int(r[1]), r[2]) for r in rows), key=lambda r: r.number
    )


def load_manifest_row(
    spark: SparkSession, path: Path, row: dict[str, Any], number: int
) -> None:
    df = spark.createDataFrame([row], MANIFEST_SCHEMA)
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", "publish")
        .option("txnVersion", number)
        .save(str(path))
    )


def game_column(board: Column) -> Column:
    """The game of an internal board id column (conf.boards.split_board): what the
    ``game`` column of the silver and gold tables holds."""
    return F.when(
        board.contains(GAME_SEP), F.substring_index(board, GAME_SEP, 1)
    ).otherwise(F.lit(DEFAULT_GAME))


def load_gold_snapshot(ranked: DataFrame, path: Path, generation: str) -> None:
    (
        ranked.withColumn("generation", F.lit(generation))
        .select(
            "board",
            "generation",
            "position",
            "rank",
            "player_id",
            "score",
            (F.col("achieved_ms") if "achieved_ms" in ranked.columns else F.lit(None))
            .cast("bigint")
            .alias("achieved_ms"),
            game_column(F.col("board")).alias("game"),
        )
        .write.format("delta")
        .mode("overwrite")
        # achieved_ms joined the table with first_achieved; older tables gain it.
        .option("mergeSchema", "true")
        .partitionBy("generation")
        .option("replaceWhere", f"generation = '{generation}'")
        .save(str(path))
    )
