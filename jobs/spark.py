"""The local SparkSession with Delta Lake, started from the cached jars (offline)."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.class_archive import driver_java_options
from jobs.jars import JARS_DIR, jar_paths

JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")
# Small shuffles: local[2] has two cores, and most jobs here shuffle modest data.
JOB_UMASK_MODE = "027"
# Let the JIT compile Spark's large generated methods (see get_spark).
HUGE_METHODS = "-XX:-DontCompileHugeMethods"
DEFAULT_SHUFFLE_PARTITIONS = int(os.environ.get("LB_SPARK_SHUFFLE_PARTITIONS", "4"))
# Rows per sorted run (one Parquet directory) that rows_in_order hands the driver.
ROWS_PER_FETCH = 100_000
# Rows per batch the driver holds while it reads a run.
ROWS_PER_BATCH = 10_000


def get_spark(
    app_name: str = "leaderboard",
    *,
    master: str | None = None,
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    jars_dir: Path = JARS_DIR,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or return the running) SparkSession with Delta configured (local
    unless ``master`` or ``LB_SPARK_MASTER`` names a cluster); ``conf``: more
    settings.

    :raises jobs.jars.JarsMissing: when the jar cache is empty (run ``make jars``).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    jars = jar_paths(jars_dir)
    class_archive = driver_java_options(jars_dir)
    # Python workers (segment writers, jobs/segment_tasks.py) need this venv's
    # pyarrow and the project: run them with the driver's interpreter, not
    # whatever ``python3`` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if "JAVA_HOME" not in os.environ and JAVA_17.is_dir():
        os.environ["JAVA_HOME"] = str(JAVA_17)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master or os.environ.get("LB_SPARK_MASTER", "local[2]"))
        .config("spark.jars", ",".join(str(p) for p in jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog",
            "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        )
        .config(
            "spark.sql.shuffle.partitions",
            str(shuffle_partitions or DEFAULT_SHUFFLE_PARTITIONS),
        )
        .config("spark.default.parallelism", "2")
        .config(
            "spark.driver.memory",
            driver_memory or os.environ.get("LB_SPARK_DRIVER_MEMORY", "4g"),
        )
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        # A write partitioned by log partition (bronze, silver contributions) keeps
        # up to this many files open per task instead of first sorting every row by
        # the partition column: that sort was ~40 % of the CPU of writing silver
        # contributions (bench/RESULTS.md). Past the limit Spark sorts the rest.
        .config("spark.sql.maxConcurrentOutputFileWriters", "16")
        # Delta's own retention checks and stats are not needed for local tables.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # -XX:-DontCompileHugeMethods: HotSpot otherwise never JIT-compiles a method
        # over 8,000 bytes of bytecode and runs it interpreted; the full recompute's
        # whole-stage generated code (explode + per-board projection) has a 44 KB
        # method, ~3x slower interpreted (bench/RESULTS.md). The class-data
        # archive, when `make setup` has written it: the driver maps Spark's and
        # Delta's classes instead of loading each (jobs/class_archive.py).
        .config(
            "spark.driver.extraJavaOptions",
            f"-Duser.timezone=UTC {HUGE_METHODS} {class_archive}".strip(),
        )
        .config("spark.executor.extraJavaOptions", HUGE_METHODS)
        # Delta files get owner rw, group r, nothing for others: Hadoop's local file
        # system sets permissions itself from this mask (default 022), whatever the
        # process umask is.
        .config("spark.hadoop.fs.permissions.umask-mode", JOB_UMASK_MODE)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def materialize(frame: DataFrame) -> DataFrame:
    """``frame`` computed once now and read back from the executors' local disk.

    A local checkpoint: it cuts the plan (range boundaries sampled once, a
    ``MERGE`` source that does not change under it). On disk, not in the heap:
    kept in memory (Spark's default for a local checkpoint), a publish's
    checkpoints compete with its later sorts for the driver's heap until the JVM
    ends, since nothing releases them (at 1 M players the ranking's sorted slices
    alone are 12 M rows, cached in blocks of 142-321 MB). The disk pages stay in
    the OS page cache while the publish reads them.
    """
    return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)


def rows_in_order(
    rows: DataFrame,
    group: str,
    index: str,
    spans: Sequence[tuple[Hashable, int, int]],
    scratch: Path,
) -> Iterator[dict[str, Any]]:
    """``rows`` in the driver as dicts, in the order of ``spans`` and, within a
    span, of ``index``.

    ``spans``: (a value of the ``group`` column, its first ``index``, its last),
    in the order wanted, the indexes dense within each (a log partition's
    positions, a board's positions): every row belongs to one span. The executors
    sort the rows into runs of at most ROWS_PER_FETCH rows and write each run as
    Parquet in a directory under ``scratch`` (where the driver and the executors
    both see it); the driver reads the runs in order, ROWS_PER_BATCH rows at a
    time, checks the order as it goes, and removes the directory when done or
    closed. A row's run is its ordinal (the spans laid end to end) divided by
    ROWS_PER_FETCH, computed without a job (a range partitioning would sample the
    rows first, one more job per read).

    Not ``toLocalIterator``: at 1 M players / 10 M records its results stayed on
    the driver's heap, run after run, until a 2 GiB driver ran out of it after
    7 M records (`make bench-publish`, bench/RESULTS.md), and it is one Spark job
    per run where this is one write."""
    # ordinal = index + shift[group]: the rows of the spans before it, minus its
    # own first index.
    shift: dict[Hashable, int] = {}
    laid = 0
    for value, first, last in spans:
        shift[value] = laid - int(first)
        laid += max(0, int(last) - int(first) + 1)
    runs = max(1, -(-laid // ROWS_PER_FETCH))
    shifts = F.create_map(
        *(c for g, v in shift.items() for c in (F.lit(g), F.lit(v).cast("long")))
    )
    ordinal = F.col(index) + shifts[F.col(group)]
    run = F.coalesce(F.floor(ordinal / ROWS_PER_FETCH), F.lit(-1)).cast("int")
    scratch.mkdir(parents=True, exist_ok=True)
    sweep_dead_runs(scratch)
    directory = Path(tempfile.mkdtemp(prefix=_runs_prefix(os.getpid()), dir=scratch))
    try:
        (
            rows.withColumn("_ordinal", ordinal)
            .withColumn("_run", run)
            .repartition(runs, "_run")
            .sortWithinPartitions("_run", "_ordinal")
            .write.mode("overwrite")
            .partitionBy("_run")
            .parquet(str(directory))
        )
        # One directory per run (_run=<n>), read in run order; the order is
        # checked while reading (a run out of place, or a row of no span, would
        # reorder what the caller reads).
        found = sorted(
            (int(d.name.split("=", 1)[1]), d) for d in directory.glob("_run=*")
        )
        last = -1
        for _, run_dir in found:
            for path in sorted(run_dir.glob("*.parquet")):
                for batch in pq.ParquetFile(path).iter_batches(ROWS_PER_BATCH):
                    for row in batch.to_pylist():
                        at = row.pop("_ordinal")
                        if at is None or at <= last:
                            raise RuntimeError(
                                f"rows out of order at {group}={row.get(group)!r}, "
                                f"{index}={row.get(index)!r} in {path}"
                            )
                        last = at
                        yield row
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _runs_prefix(pid: int) -> str:
    """``rows-<host>-<pid>-``: the reader a directory of sorted runs belongs to
    (``tempfile`` adds a suffix without ``-``, so the name splits from the right)."""
    return f"rows-{socket.gethostname()}-{pid}-"


def sweep_dead_runs(scratch: Path) -> list[Path]:
    """Remove the sorted runs (:func:`rows_in_order`) that readers on this host left
    in ``scratch`` when their process died; returns the directories removed.

    A reader removes its runs when done or closed, and the publisher's scratch is
    emptied whenever the publish lock is taken; a killed ``lb rebuild`` or ``lb
    verify`` holds no lock, so its runs (as large as the rows it read) stayed until
    this. Runs of a live process, of another host (the executors write where the
    driver reads, so a data dir may be shared by drivers on several hosts, whose
    processes this host cannot see) and of older code (no owner in the name) stay.
    """
    removed = []
    mine = f"rows-{socket.gethostname()}"
    for directory in scratch.glob("rows-*"):
        # rows-<host>-<pid>-<suffix>: the host may hold "-" itself ("vm" and
        # "vm-2" are two hosts), the pid and the suffix do not.
        parts = directory.name.rsplit("-", 2)
        if len(parts) != 3 or parts[0] != mine or not parts[1].isdigit():
            continue
        if _alive(int(parts[1])):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
