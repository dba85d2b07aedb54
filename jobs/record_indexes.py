"""A generation's two indexes of the log records it landed, written from one read
of bronze: the landed records index (jobs/landed.py; serving/landed.py owns the
format), which answers a redelivery once the speed layer drops its records, and
the contributions index (serving/contributions.py owns the format), which the
history read lists between snapshots.

Each publish reads the bronze rows landed since its parent generation's boundary
(``(partition, position, player_id, received_at_ms, raw)``: a Delta range the
table's position statistics prune) in log order, parses each record once, and
hands it to both: the landed index takes its dedupe and contribution records,
the contributions index the applied board items
(:func:`serving.contributions.record_contributions`) as one more layer over the
parent's chain (the deltas continue from the parent's newest totals). Without a
parent index (the first publish, or a parent published before an index existed)
an index reads from the log's beginning, once, and then on its own: the landed
index only what was received within the record lifetime.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from jobs.land import bronze_path, log_rows_in_order, table_exists
from jobs.landed import LandedIndexWriter, parent_generation
from jobs.publish_lock import scratch_dir
from jobs.recompute import transform_between_boundaries
from serving.contributions import Applied, chain_of, record_contributions, write_index


def write_record_indexes(
    settings: Settings,
    spark: SparkSession,
    generation: str,
    number: int,
    boundary: Mapping[int, int],
    directory: Path,
    *,
    compact: bool = False,
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Write both indexes into ``directory`` (the generation's temp directory);
    returns their manifest entries: the landed index's (None when no complete
    one can be written) and the contributions index's."""
    # Both indexes extend the same parent: found once (a listing of the segments
    # directory and a read of each manifest).
    newest = parent_generation(settings.segments_dir, number)
    landed = LandedIndexWriter.plan(settings, newest)
    parent, after = plan_contributions_index(newest, boundary)
    path = bronze_path(settings)

    def between(start: Mapping[int, int], since_ms: int | None = None) -> Any:
        """The bronze rows after ``start`` (and received since ``since_ms``)."""
        bronze = spark.read.format("delta").load(str(path))
        rows = transform_between_boundaries(bronze, start, boundary)
        if since_ms is not None:
            rows = rows.where(F.col("received_at_ms") >= F.lit(since_ms))
        return rows

    def records(
        start: Mapping[int, int], since_ms: int | None = None
    ) -> Iterator[tuple[dict[str, Any], Any]]:
        """(bronze row, its parsed ``raw``) after ``start``, in log order."""
        if not table_exists(path):
            return
        rows = between(start, since_ms).select(
            "partition", "position", "player_id", "received_at_ms", "raw"
        )
        for row in log_rows_in_order(rows, start, boundary, scratch_dir(settings)):
            yield row, orjson.loads(row["raw"])

    def take(row: dict[str, Any], record: Any) -> None:
        landed.take(row["partition"], row["position"], row["received_at_ms"], record)

    # One read for both when they start at the same boundary (their parent's, or
    # the log's beginning on a first publish). Else the landed index reads its
    # own range first (without a parent index, only the records received within
    # the record lifetime, filtered in Spark), unless its parent's manifest
    # already says that a record logged before its format existed is in that
    # range. An aggregate in Spark finds such records first (a raw text without
    # the key cannot hold it; the read in log order checks the rest exactly), so
    # that an index that cannot be complete costs one pass, not a sorted read.
    shared = all(int(landed.after.get(p, 0)) == int(after.get(p, 0)) for p in boundary)
    if not shared and landed.complete and table_exists(path):
        old = (
            between(landed.after, landed.since_ms)
            .where(~F.col("raw").contains('"rc":'))
            .agg(F.max("received_at_ms"))
            .first()
        )
        if old is not None and old[0] is not None:
            landed.unindexed(int(old[0]))
        else:
            for row, record in records(landed.after, landed.since_ms):
                take(row, record)
                if not landed.complete:
                    break

    def applied() -> Iterator[Applied]:
        """The contributions index's items, in log order (with the landed index
        taking each record on the way when the read is shared)."""
        for row, record in records(after):
            if shared:
                take(row, record)
            if row["player_id"] is None:
                continue
            yield from record_contributions(
                record, row["player_id"], row["partition"], row["position"]
            )

    contributions = write_index(
        directory, generation, applied(), parent, compact=compact
    )
    return landed.write(directory, generation, compact=compact), contributions


def plan_contributions_index(
    parent: tuple[Path, dict[str, Any]] | None, boundary: Mapping[int, int]
) -> tuple[tuple[Path, dict[str, Any]] | None, Mapping[int, int]]:
    """The contributions index of a generation at ``boundary`` whose newest
    published parent is ``parent`` (directory, manifest; None: none): the parent
    whose chain it extends and the boundary after which it takes the log's
    records; (None, {}) when it starts from scratch (every landed position)."""
    if parent is None or chain_of(parent[1]) is None:
        return None, {}
    after = {int(p): int(v) for p, v in parent[1].get("boundary", {}).items()}
    if any(int(boundary.get(p, 0)) < v for p, v in after.items()):
        # A parent past this boundary (its chain would hold positions this
        # generation does not): every landed position.
        return None, {}
    return parent, after
