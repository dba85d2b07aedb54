"""The local SparkSession with Delta Lake, started from the cached jars (offline)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from jobs.class_archive import driver_java_options
from jobs.jars import JARS_DIR, jar_paths

JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")
# Small shuffles: local[2] has two cores, and most jobs here shuffle modest data.
JOB_UMASK_MODE = "027"
# Let the JIT compile Spark's large generated methods (see get_spark).
HUGE_METHODS = "-XX:-DontCompileHugeMethods"
DEFAULT_SHUFFLE_PARTITIONS = int(os.environ.get("LB_SPARK_SHUFFLE_PARTITIONS", "4"))


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
