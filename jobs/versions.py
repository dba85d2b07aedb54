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

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.land import table_exists
from jobs.recompute import transform_between_boundaries, transform_within_boundary

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


VERSIONS_SCHEMA = "board string, player_id string, version bigint"


def segment_versions_reader(directory: str) -> Any:
    """The ``mapInArrow`` function: (board, file) rows in, the (board, player_id,
    version) rows of those segment files out (read on the executors, so the
    driver never holds a board's rows). A closure over a plain string only."""

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from serving.files import read_arrow

        for batch in batches:
            boards = batch.column("board").to_pylist()
            files = batch.column("file").to_pylist()
            for board, name in zip(boards, files, strict=True):
                table = read_arrow(Path(directory) / name)
                n = table.num_rows
                if n == 0:
                    continue
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([board] * n, pa.string()),
                        table.column("player_id").combine_chunks(),
                        table.column("version").combine_chunks(),
                    ],
                    names=["board", "player_id", "version"],
                )

    return read


def segment_files_with_versions(
    directory: Path, boards: Mapping[str, Mapping[str, Any]], only: Iterable[str]
) -> dict[str, str] | None:
    """board -> segment file of ``only``'s boards in a previous generation's
    ``directory`` (its manifest's ``boards`` map), or None when one of them lacks a
    ``version`` column (written before segments kept it) or is gone: the versions
    are then derived from the whole log. Reads each file's schema only."""
    files: dict[str, str] = {}
    for board in only:
        meta = boards.get(board)
        if meta is None:
            continue  # a board new in this generation: its pairs are all missing
        path = directory / str(meta["file"])
        try:
            with pa.memory_map(str(path), "r") as source:
                schema = ipc.open_file(source).schema
        except (OSError, pa.ArrowInvalid):
            return None
        if "version" not in schema.names:
            return None
        files[board] = str(meta["file"])
    return files


def with_versions_since(
    spark: SparkSession,
    rows: DataFrame,
    bronze_path: Path,
    boundary: Mapping[int, int],
    previous_boundary: Mapping[int, int],
    previous_directory: Path,
    previous_files: Mapping[str, str],
) -> DataFrame:
    """:func:`with_versions` of an incremental build without parsing the history.

    Versions only grow, so a pair's version at ``boundary`` is the larger of its
    version at the previous boundary and the largest the log's delta gives it. The
    previous generation's segments hold the first for every pair on their boards
    (``previous_files``: board -> file, read on the executors; 0 where the log never
    named the pair, which the segment writes for a null too). Every board whose
    pairs a delta record names is rewritten by the incremental build (it re-ranks
    them), so each segment's versions are those at its own generation's boundary.
    Only pairs of ``rows`` absent from the previous segments (a player new on a
    board, or no longer hidden) need the whole log: the records of just those
    players are parsed."""
    if not table_exists(bronze_path):
        return rows.withColumn("version", F.lit(None).cast("bigint"))
    bronze = spark.read.format("delta").load(str(bronze_path))
    listing = spark.createDataFrame(
        sorted(previous_files.items()), "board string, file string"
    )
    tasks = max(
        1,
        min(
            len(previous_files),
            int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
        ),
    )
    before = (
        listing.repartition(tasks)
        .mapInArrow(segment_versions_reader(str(previous_directory)), VERSIONS_SCHEMA)
        .localCheckpoint(eager=True)
    )
    delta = transform_versions(
        transform_between_boundaries(bronze, previous_boundary, boundary).select(
            "player_id", "raw"
        )
    )
    missing = (
        rows.select("board", "player_id")
        .join(before, ["board", "player_id"], "left_anti")
        .select("player_id")
        .distinct()
        .localCheckpoint(eager=True)
    )
    known = before.unionByName(delta)
    if not missing.isEmpty():
        history = transform_within_boundary(bronze, boundary).select("player_id", "raw")
        known = known.unionByName(
            transform_versions(history.join(missing, "player_id", "left_semi"))
        )
    versions = known.groupBy("board", "player_id").agg(
        F.max("version").alias("version")
    )
    return rows.join(versions, ["board", "player_id"], "left")
