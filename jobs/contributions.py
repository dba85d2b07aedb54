"""A generation's contributions index (serving/contributions.py owns the format):
what the history read lists as a player's contributions between snapshots.

Each publish reads the bronze rows it landed since its parent generation's
boundary (``(partition, position, player_id, raw)``: a Delta range the table's
position statistics prune), derives the applied board items of each log record
(:func:`serving.contributions.record_contributions`) and writes them as one more
layer over the parent's chain (the deltas continue from the parent's newest
totals). Without a parent index (the first publish, or a parent published before
the index existed) it reads every bronze row up to the boundary, once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession

from conf.settings import Settings
from jobs.land import bronze_path, log_rows_in_order, table_exists
from jobs.landed import parent_generation
from jobs.publish_lock import scratch_dir
from jobs.recompute import transform_between_boundaries
from serving.contributions import Applied, chain_of, record_contributions, write_index


def write_contributions_index(
    settings: Settings,
    spark: SparkSession,
    generation: str,
    number: int,
    boundary: Mapping[int, int],
    directory: Path,
    *,
    compact: bool = False,
) -> dict[str, Any]:
    """Write the generation's index into ``directory`` (its temp directory);
    returns its manifest entry."""
    parent = parent_generation(settings.segments_dir, number)
    after: Mapping[int, int] = {}
    if parent is not None and chain_of(parent[1]) is not None:
        after = {int(p): int(v) for p, v in parent[1].get("boundary", {}).items()}
    if (
        parent is None
        or chain_of(parent[1]) is None
        or any(int(boundary.get(p, 0)) < v for p, v in after.items())
    ):
        # No index to extend, or a parent past this boundary (its chain would
        # hold positions this generation does not): every landed position.
        parent, after = None, {}
    return write_index(
        directory,
        generation,
        _applied(spark, bronze_path(settings), after, boundary, scratch_dir(settings)),
        parent,
        compact=compact,
    )


def _applied(
    spark: SparkSession,
    path: Path,
    after: Mapping[int, int],
    through: Mapping[int, int],
    scratch: Path,
) -> Iterator[Applied]:
    if not table_exists(path):
        return
    bronze = spark.read.format("delta").load(str(path))
    rows = transform_between_boundaries(bronze, after, through).select(
        "partition", "position", "player_id", "raw"
    )
    for row in log_rows_in_order(rows, after, through, scratch):
        if row["player_id"] is None:
            continue
        yield from record_contributions(
            orjson.loads(row["raw"]),
            row["player_id"],
            row["partition"],
            row["position"],
        )
