"""Serving segments written by the executors, not the driver.

The gold rows of a generation are hash-partitioned by board; each task sorts its
boards' rows by (board, position) and writes each board's files (display-order rows,
player-id index, equi-depth bucket counts) straight into the generation's work
directory through :mod:`serving.segments`, then hands back one small row per board:
its manifest entry (population, file names, checksums). The driver only collects
those entries, so its memory does not grow with the boards' populations.

The work directory must be visible to every executor at the same path (one machine,
or a shared file system), as the Delta tables already must be.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ENTRY_SCHEMA = "board string, entry string"
SEGMENT_COLUMNS = ["board", "position", "player_id", "score", "achieved_ms"]


def segment_writer(
    directory: str,
    bucket_target: int,
    orders: Mapping[str, tuple[bool, bool]],
    umask: int,
) -> Any:
    """The ``mapInArrow`` function: Arrow batches of gold rows in, (board, manifest
    entry as JSON) out. A closure over plain values only (it is pickled to the
    executors); ``umask`` is the job's (files not world-readable), since a Python
    worker does not inherit the driver's."""
    orders = dict(orders)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from serving.segments import write_segments

        received = list(batches)
        if not received:  # a task whose hash partition got no board
            return
        table = pa.Table.from_batches(received)
        if table.num_rows == 0:
            return
        order = pc.sort_indices(
            table, sort_keys=[("board", "ascending"), ("position", "ascending")]
        )
        previous = os.umask(umask)
        try:
            entries = write_segments(
                table.take(order), Path(directory), bucket_target, orders
            )
        finally:
            os.umask(previous)
        boards = sorted(entries)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(boards, pa.string()),
                pa.array([json.dumps(entries[b]) for b in boards], pa.string()),
            ],
            names=["board", "entry"],
        )

    return write


def write_segments_distributed(
    gold: DataFrame,
    directory: Path,
    bucket_target: int,
    orders: Mapping[str, tuple[bool, bool]] | None = None,
    tasks: int | None = None,
    umask: int = 0o027,
) -> dict[str, dict[str, Any]]:
    """Write every board of ``gold`` (one generation's rows) into ``directory`` from
    the executors; returns the manifest's boards map (with per-file checksums)."""
    rows = gold.select(*SEGMENT_COLUMNS, *[c for c in ["version"] if c in gold.columns])
    tasks = tasks or int(
        rows.sparkSession.conf.get("spark.sql.shuffle.partitions") or 4
    )
    written = (
        rows.repartition(tasks, F.col("board"))
        .mapInArrow(
            segment_writer(str(directory), bucket_target, orders or {}, umask),
            ENTRY_SCHEMA,
        )
        .collect()
    )
    return {r["board"]: json.loads(r["entry"]) for r in written}
