"""The batch layer's Delta tables a publish writes, and its gold tables' rows.

``silver_contributions`` / ``silver_totals`` hold the latest recompute,
``gold_snapshots`` the ranked rows of every generation published in full,
``gold_changes`` what each layered generation changed, ``gold_manifest`` one row
per published generation (the exact ``manifest.json`` text, for repair).

Gold is layered like the serving segments (DESIGN.md, "Cost follows the change"):
an incremental build writes only the (board, player) rows whose total it
re-derived (a new score, or ``removed``), and its manifest's ``build.gold`` names
the full generation it starts from and the chain of layered generations since
(``{"base": "g5", "layers": ["g6", "g7"], ...}``). A generation's full ranking is
the base's rows with each player's newest row from the chain, ranked again
(:func:`transform_generation_rows`, :func:`generation_ranking`); analysts run the
same as SQL (docs/TABLES.md). A build past the chain limits writes the full
ranking again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import DEFAULT_GAME, GAME_SEP, BoardsConfig
from jobs.land import table_exists
from jobs.rank import asc_boards, board_orders, transform_rank

SILVER_CONTRIBUTIONS = "silver_contributions"
SILVER_TOTALS = "silver_totals"
GOLD_SNAPSHOTS = "gold_snapshots"
GOLD_MANIFEST = "gold_manifest"
GOLD_CHANGES = "gold_changes"

GOLD_COLUMNS = ["board", "position", "rank", "player_id", "score", "achieved_ms"]

# Delta keeps min/max statistics of a table's first 32 columns unless told which:
# about a third of the CPU of writing silver_contributions (computing and writing
# it takes 14 % less CPU with them on its keys only: bench/RESULTS.md, "Silver's
# statistics"). The keys are what an incremental publish's DELETE of a few pairs
# names (jobs/incremental.py load_replace: files whose ranges miss every key are
# skipped) and what analysts filter on; the other columns are never filtered on
# alone.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
# Silver's deletion vectors (jobs/incremental.py silver_properties says why).
DELETION_VECTORS = "delta.enableDeletionVectors"
SILVER_STATS_COLUMNS = {
    SILVER_CONTRIBUTIONS: "player_id,match_id,board,game",
    SILVER_TOTALS: "board,game,player_id",
}

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


def load_gold_changes(
    changes: DataFrame, path: Path, generation: str, number: int, base: str
) -> None:
    """Write a layered generation's gold: ``changes`` holds (board, player_id, score,
    achieved_ms, removed) for every (board, player) whose public row may differ from
    the parent's (score null where ``removed``). ``replaceWhere`` on the generation,
    so a retried publish writes the same partition again."""
    (
        changes.select(
            "board",
            F.lit(generation).alias("generation"),
            F.lit(number).cast("bigint").alias("generation_number"),
            F.lit(base).alias("base_generation"),
            "player_id",
            F.when(F.col("removed"), F.lit(None))
            .otherwise(F.col("score"))
            .cast("bigint")
            .alias("score"),
            F.when(F.col("removed"), F.lit(None))
            .otherwise(F.col("achieved_ms"))
            .cast("bigint")
            .alias("achieved_ms"),
            F.col("removed").cast("boolean").alias("removed"),
            game_column(F.col("board")).alias("game"),
        )
        .write.format("delta")
        .mode("overwrite")
        .partitionBy("generation")
        .option("replaceWhere", f"generation = '{generation}'")
        .save(str(path))
    )


def drop_crashed_rows(spark: SparkSession, path: Path, generation: str) -> None:
    """Delete ``generation``'s partition of the gold table at ``path`` when one is
    there: an earlier attempt of the generation number wrote it and crashed before
    its manifest row, and this attempt writes the generation otherwise. In
    ``gold_snapshots``: the attempt wrote it in full, this one layered, and the
    table keeps only generations published in full; in ``gold_changes``: the
    attempt wrote a layer, this one repeats its parent's chain (nothing changed),
    and the segments phase reads the generation's own changes (docs/TABLES.md). A
    pruned read of one partition; nothing is committed when there is none."""
    from delta.tables import DeltaTable

    if not table_exists(path):
        return
    if (
        spark.read.format("delta")
        .load(str(path))
        .where(F.col("generation") == generation)
        .limit(1)
        .count()
    ):
        DeltaTable.forPath(spark, str(path)).delete(F.col("generation") == generation)


def gold_chain(manifest: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """(base generation, layered generations oldest first) of a generation whose
    gold is layered (its manifest's ``build.gold``); None when its gold is full."""
    gold = (manifest.get("build") or {}).get("gold")
    if not gold:
        return None
    return str(gold["base"]), [str(g) for g in gold["layers"]]


def _where_boards(frame: DataFrame, boards: Sequence[str] | None) -> DataFrame:
    return frame if boards is None else frame.where(F.col("board").isin(list(boards)))


def transform_generation_rows(
    spark: SparkSession,
    delta_dir: Path,
    generation: str,
    manifest: Mapping[str, Any],
    boards: Sequence[str] | None = None,
) -> DataFrame:
    """(board, player_id, score, achieved_ms): the public rows of one published
    generation (``manifest``: its manifest), unranked, of ``boards`` (None: all).
    A layered generation's are its base's rows with each (board, player)'s newest
    row from the chain's changes, the removed ones left out."""
    columns = ["board", "player_id", "score", "achieved_ms"]
    chain = gold_chain(manifest)
    snapshot = _where_boards(
        spark.read.format("delta")
        .load(str(delta_dir / GOLD_SNAPSHOTS))
        .where(F.col("generation") == (chain[0] if chain else generation)),
        boards,
    ).select(*columns)
    if chain is None:
        return snapshot
    layers = chain[1]
    changes = _where_boards(
        spark.read.format("delta")
        .load(str(delta_dir / GOLD_CHANGES))
        .where(F.col("generation").isin(layers)),
        boards,
    )
    stacked = snapshot.select(
        *columns, F.lit(0).alias("_layer"), F.lit(False).alias("removed")
    ).unionByName(
        changes.select(
            *columns,
            F.array_position(
                F.array(*(F.lit(g) for g in layers)), F.col("generation")
            ).alias("_layer"),
            "removed",
        )
    )
    newest = Window.partitionBy("board", "player_id").orderBy(F.col("_layer").desc())
    return (
        stacked.withColumn("_newest", F.row_number().over(newest))
        .where((F.col("_newest") == 1) & ~F.col("removed"))
        .select(*columns)
    )


def generation_ranking(
    spark: SparkSession,
    delta_dir: Path,
    generation: str,
    manifest: Mapping[str, Any],
    boards_config: BoardsConfig,
    boards: Sequence[str] | None = None,
) -> DataFrame:
    """The full ranking (GOLD_COLUMNS) of one published generation's ``boards``
    (None: all): its ``gold_snapshots`` partition, or for a layered generation its
    rows (:func:`transform_generation_rows`) ranked as a full build ranks them."""
    if gold_chain(manifest) is None:
        return _where_boards(
            spark.read.format("delta")
            .load(str(delta_dir / GOLD_SNAPSHOTS))
            .where(F.col("generation") == generation),
            boards,
        ).select(*GOLD_COLUMNS)
    unique = [b for b, (_, u) in board_orders(boards_config).items() if u]
    return transform_rank(
        transform_generation_rows(spark, delta_dir, generation, manifest, boards),
        int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
        unique,
        asc_boards(boards_config),
    ).select(*GOLD_COLUMNS)
