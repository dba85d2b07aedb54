"""Each (board, player)'s version at a generation's boundary, for its serving segment.

The speed layer counts a version per pair (every applied change adds one) and every
log record's result carries the total and version each board had after it, so the
version at the boundary is the largest one the landed log gave the pair (versions
only grow). The segment keeps it beside the score: a player unchanged since the
generation then needs no per-board state in Redis to keep counting (issue 11,
"only deltas in Redis"; speed/rebase.py drops it, the owner transaction takes it
from the segment).

Where the versions come from. Every generation keeps, per board, the version of
EVERY pair the log named up to its boundary: the segment's ``version`` column for
the pairs it ranks, and ``<board>.versions.arrow`` (serving/segments.py) for the
others (hidden players, matches corrected away, held records, totals that
vanished, boards with no total at all). Versions only grow, so at the next
boundary a pair's version is the largest of the previous generation's (segment or
side file) and the log's delta's; a pair in neither was never named before and
takes the delta's alone. So

* a full build parses the result items of every landed record
  (:func:`named_versions` without ``since``);
* an incremental build parses only the delta's records and reads the previous
  generation's files of the boards it rewrites, on the executors, in the same
  task that writes each board (jobs/segment_tasks.py, :func:`assign_versions`):
  no history, no shuffle of the previous rows.

Both write the same bytes (tests/jobs/test_incremental.py). A previous generation
without the side files (its manifest has no ``versions`` map: older code) gets a
full build's segments instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.land import table_exists
from jobs.recompute import transform_between_boundaries, transform_within_boundary
from serving.files import read_arrow
from serving.layers import compacted, is_layered, load_board
from serving.segments import read_versions

# Only what the version needs from a log record (bronze ``raw`` is the record): its
# result's items, [board, total, version(, status)] per board, or in a record
# written before them, objects under "boards" (serving/log_records.py). JSON
# numbers parse into a string field as their text.
RESULT_BOARDS = (
    "struct<result: struct<items: array<array<string>>,"
    " boards: array<struct<board: string, version: bigint>>>>"
)
NAMED_SCHEMA = "board string, player_id string, version bigint"
KNOWN_SCHEMA = pa.schema(
    [("board", pa.string()), ("player_id", pa.string()), ("version", pa.int64())]
)


def transform_versions(bronze: DataFrame) -> DataFrame:
    """(board, player_id, version) from bronze rows: the largest per pair."""
    result = F.from_json(F.col("raw"), RESULT_BOARDS)["result"]
    items = F.transform(
        result["items"],
        lambda item: F.struct(
            item[0].alias("board"), item[2].cast("bigint").alias("version")
        ),
    )
    return (
        bronze.select(
            F.col("player_id"),
            F.explode(F.coalesce(items, result["boards"])).alias("item"),
        )
        .select(
            F.col("item.board").alias("board"),
            "player_id",
            F.col("item.version").alias("version"),
        )
        .groupBy("board", "player_id")
        .agg(F.max("version").alias("version"))
    )


def named_versions(
    spark: SparkSession,
    bronze_path: Path,
    boundary: Mapping[int, int],
    since: Mapping[int, int] | None = None,
) -> DataFrame:
    """(board, player_id, version): the largest version the log's records up to
    ``boundary`` (after ``since`` when given: the delta only) gave each pair."""
    if not table_exists(bronze_path):
        return spark.createDataFrame([], NAMED_SCHEMA)
    bronze = spark.read.format("delta").load(str(bronze_path))
    records = (
        transform_within_boundary(bronze, boundary)
        if since is None
        else transform_between_boundaries(bronze, since, boundary)
    )
    return transform_versions(records.select("player_id", "raw"))


def previous_versions(
    directory: Path,
    board: str,
    segment: str | None,
    side: str | None,
    meta: Mapping[str, Any] | None = None,
) -> pa.Table:
    """(board, player_id, version) of one board in a previous generation: its
    segment's rows (those with a version: 0 means never named) and its side file.
    ``meta``: the board's manifest entry; a layered board's rows are its base
    merged with its layers (serving/layers.py)."""
    parts = [KNOWN_SCHEMA.empty_table()]
    if meta is not None and is_layered(meta):
        players, _, _, versions = compacted(load_board(directory, board, dict(meta)))
        if versions is not None and len(players):
            rows = pa.table({"player_id": players, "version": versions})
            parts.append(_with_board(board, rows))
    elif segment is not None:
        table = read_arrow(directory / segment)
        if "version" in table.column_names and table.num_rows:
            parts.append(_with_board(board, table))
    if side is not None:
        parts.append(_with_board(board, read_versions(directory / side)))
    return pa.concat_tables(parts)


def _with_board(board: str, table: pa.Table) -> pa.Table:
    n = table.num_rows
    return pa.table(
        [
            pa.array([board] * n, pa.string()),
            table.column("player_id").cast(pa.string()),
            table.column("version").cast(pa.int64()),
        ],
        schema=KNOWN_SCHEMA,
    )


def assign_versions(rows: pa.Table, known: pa.Table) -> tuple[pa.Array, pa.Table]:
    """(each row's version, the side rows) of one task's boards.

    ``rows``: the (board, player_id) pairs the segments rank, one each; ``known``:
    (board, player_id, version) rows naming pairs, repeats allowed (the previous
    generation's and the delta's, or the whole log's). A row's version is the
    largest known one (null when none: the segment writes 0); the side rows are the
    known pairs with a version above 0 that no row holds, sorted by (board,
    player_id). 0 and "never named" are the same to a segment, so a previous
    segment's 0 never reaches a side file (the full build's would not have it)."""
    best = (
        known.filter(pc.greater(known.column("version"), 0))
        .group_by(["board", "player_id"])
        .aggregate([("version", "max")])
    )
    best = pa.table(
        [best.column("board"), best.column("player_id"), best.column("version_max")],
        schema=KNOWN_SCHEMA,
    )
    keys = pa.table(
        {
            "board": rows.column("board").cast(pa.string()),
            "player_id": rows.column("player_id").cast(pa.string()),
            "row": pa.array(np.arange(rows.num_rows, dtype=np.int64)),
        }
    )
    # A hash join reorders rows: put them back by their row number.
    joined = keys.join(best, ["board", "player_id"], join_type="left outer")
    versions = joined.sort_by("row").column("version").combine_chunks()
    side = best.join(
        keys.select(["board", "player_id"]),
        ["board", "player_id"],
        join_type="left anti",
    ).sort_by([("board", "ascending"), ("player_id", "ascending")])
    return versions, side.select(["board", "player_id", "version"])
