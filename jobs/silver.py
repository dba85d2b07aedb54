"""``silver_contributions``: one row per (player, match) with its boards.

The table stores :func:`jobs.recompute.transform_match_contributions` rows
(``partition``, ``player_id``, ``match_id``, ``boards``: an array of per-board
structs, ``generation``): a full publish writes about a seventh of the rows one per
(player, match, board) took, and Delta collects statistics for top-level columns
only. Every per-board reader (totals, the season close, the quarantine thresholds,
the analysts' example) reads it through :func:`read_contributions`, which explodes
it into the per-board rows docs/TABLES.md describes.

Tables written before this layout (one row per board, a top-level ``board``
column) are migrated in place by the next full publish (:func:`write_contributions`
replaces the schema in a new table version; older versions stay readable by time
travel): the build version (jobs/incremental.py) changed with the layout, so an
old generation is never the base of an incremental build.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.land import table_exists
from jobs.recompute import explode_contributions

SILVER_CONTRIBUTIONS = "silver_contributions"


def is_per_board(frame: DataFrame) -> bool:
    """Whether ``frame`` has the layout before (player, match) rows: one row per
    board (a ``board`` column, no ``boards`` array)."""
    return "board" in frame.columns and "boards" not in frame.columns


def read_contributions(spark: SparkSession, path: Path) -> DataFrame:
    """The per-board contribution rows of the table at ``path`` (with
    ``generation``), whichever layout it is in."""
    stored = spark.read.format("delta").load(str(path))
    return stored if is_per_board(stored) else explode_contributions(stored)


def write_contributions(
    spark: SparkSession, rows: DataFrame, path: Path, generation: str
) -> bool:
    """Overwrite the table at ``path`` with (player, match) ``rows`` of
    ``generation``; returns whether an older per-board layout was migrated.

    A new column extends the schema in place (``mergeSchema``), keeping the column
    comments and table properties (jobs/hygiene.py). The per-board layout is
    replaced (``overwriteSchema``: the same table, a new version; the comments of
    the new columns are set from docs/TABLES.md)."""
    migrate = table_exists(path) and is_per_board(
        spark.read.format("delta").load(str(path))
    )
    writer = (
        rows.withColumn("generation", F.lit(generation))
        .write.format("delta")
        .mode("overwrite")
        .partitionBy("partition")
    )
    if migrate:
        writer = writer.option("overwriteSchema", "true")
    else:
        writer = writer.option("mergeSchema", "true")
    writer.save(str(path))
    if migrate:
        from jobs.hygiene import TABLES_DOC, apply_column_comments, parse_tables_doc

        doc = parse_tables_doc(TABLES_DOC.read_text()).get(SILVER_CONTRIBUTIONS)
        if doc is not None:
            apply_column_comments(spark, path.resolve(), doc)
    return migrate
