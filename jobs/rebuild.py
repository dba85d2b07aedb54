"""``lb rebuild``'s batch side: the landed log records, read from Delta bronze.

:func:`speed.rebuild.rebuild` folds a partition's whole log, in position order,
into what Redis should hold. The part of the log already landed lives in bronze
and is read here with Spark; the speed layer takes it as a function of the
partition and reads the rest from the Redis log itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
from pyspark.sql import SparkSession

from conf.settings import Settings
from jobs.land import (
    bronze_path,
    extract_landed_through,
    log_rows_in_order,
    table_exists,
)
from jobs.publish_lock import scratch_dir
from jobs.spark import get_spark
from speed.rebuild import RebuildReport, rebuild


def bronze_records(
    settings: Settings, spark: SparkSession, partition: int
) -> Iterator[dict[str, Any]]:
    """One partition's landed log records, in position order, from Delta bronze
    (streamed: bronze is partitioned by partition, so this reads only its files;
    in sorted runs, as the publish's indexes read it, jobs/land.py
    ``log_rows_in_order``: not ``toLocalIterator``, whose fetched results stayed
    on a 2 GiB driver's heap at 10 M records)."""
    path = bronze_path(settings)
    if not table_exists(path):
        return
    through = extract_landed_through(spark, path).get(int(partition), 0)
    rows = (
        spark.read.format("delta")
        .load(str(path))
        .where(f"partition = {int(partition)}")
        .select("partition", "position", "raw")
    )
    # Its own scratch directory: a rebuild does not hold the publish lock, which
    # empties the publishers' one.
    scratch = scratch_dir(settings, "rebuild")
    for row in log_rows_in_order(rows, {}, {int(partition): through}, scratch):
        yield orjson.loads(row["raw"])


def run_rebuild(
    settings: Settings,
    *,
    spark: SparkSession | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
    before_switch: Callable[[int], None] | None = None,
) -> RebuildReport:
    """Rebuild every partition's speed layer from bronze and the Redis log; with
    ``dry_run`` only diff (see :func:`speed.rebuild.rebuild`)."""
    session = spark if spark is not None else get_spark("rebuild")
    return rebuild(
        settings,
        lambda partition: bronze_records(settings, session, partition),
        dry_run=dry_run,
        progress=progress,
        before_switch=before_switch,
    )
