"""The tests' Spark: the one local SparkSession of a test session (the production
JVM flags; C1-only JIT was measured slower, see start_spark), and a standalone
cluster on loopback (one master and one worker with two single-core executors,
started from the pyspark distribution's ``bin/spark-class``)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.spark import get_spark
from jobs.spark_standalone import StandaloneFailed, standalone_cluster

# The tests' data is tiny: a publish's time is per-job / per-task overhead, not
# data. One shuffle partition (production: 4) took the publish chain of
# tests/drills/test_spark_cluster_publish.py's history (full, incremental, full:
# ~310 Spark jobs) from 215.6 to 166.1 s in one JVM, one after the other (load
# 8-10). The same setting for the tests' `lb` subprocesses: SUBPROCESS_ENV.
SHUFFLE_PARTITIONS = 1

# The session's queries are interpreted, not compiled: with rows in the tens,
# generating Java source for every projection (Spark builds and formats the code,
# its cache key, in every task before looking it up; Janino compiles it; the JIT
# compiles that) costs more than running the rows. JFR on a publish pair with
# codegen on (75 s of samples, load ~13): 52 % of the JVM's Java samples in code
# generation and Janino, 25 % in CodeFormatter.stripExtraNewLinesAndComments alone.
# Results are the same either way (`python -m bench.spark_ab`: equal segment
# bytes). The `lb` subprocesses run interpreted too (SUBPROCESS_ENV). Only the
# cluster test's driver (tests/drills/cluster_publish.py, started with the cluster's
# environment, not SUBPROCESS_ENV) keeps production's whole-stage codegen, so
# `make drills` (in CI) still runs it, and tests/drills/test_spark_cluster_publish.py
# compares its segments byte for byte with this session's. Figures:
# bench/RESULTS.md, "Test suite".
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

# The JIT of the `lb` subprocesses' driver JVMs (`lb publish`, the Airflow `dags
# test` tasks): C1 only. Each lives for one command (a few dozen Spark jobs, a
# minute or two of CPU), too short for C2's compilations to pay back: an empty
# `lb publish` cost 75.3 / 82.9 CPU-seconds of JVM with the default tiered JIT and
# 44.8 / 39.4 C1-only (-47 %), alternating in one command at load 5-21; serial GC
# gained nothing (74.7 alone, 48.2 with C1). Figures: bench/history/
# 2026-12-03-7-session-20-suite-jvm.md. The cluster test's JVMs too
# (CLUSTER_JAVA_OPTIONS). Not for the session's own JVM (start_spark), which runs
# hundreds of publishes.
SUBPROCESS_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

# The `lb` subprocesses' Spark settings. jobs/spark.py reads the shuffle partitions
# from LB_SPARK_SHUFFLE_PARTITIONS; INTERPRETED and SUBPROCESS_JAVA_OPTIONS go in
# through PySpark's own PYSPARK_SUBMIT_ARGS (spark-submit's defaults for the JVM it
# starts), production code unchanged. The JVM options as
# spark.driver.defaultJavaOptions, which the launcher puts before
# spark.driver.extraJavaOptions: get_spark sets the latter (-Duser.timezone=UTC,
# HUGE_METHODS) on the builder, and PySpark passes the builder's settings to
# spark-submit before PYSPARK_SUBMIT_ARGS, so an extraJavaOptions here would
# replace them.
SUBPROCESS_ENV = {
    "LB_SPARK_SHUFFLE_PARTITIONS": str(SHUFFLE_PARTITIONS),
    "PYSPARK_SUBMIT_ARGS": " ".join(
        [f"--conf {key}={value}" for key, value in INTERPRETED.items()]
        + [
            "--conf",
            shlex.quote(f"spark.driver.defaultJavaOptions={SUBPROCESS_JAVA_OPTIONS}"),
            "pyspark-shell",
        ]
    ),
}


# The session's JVM lives for a whole worker's Spark group (15 minutes, hundreds of
# publishes over small Delta tables of their own), and what Spark and Delta keep
# per table and per query by default grew its live heap to ~560 MB of its 2 GB
# (after a full collection, 14 minutes into `make test`): G1 then ran a concurrent
# cycle every 2.4 s (358), and its GC threads took 113 + 72 CPU-seconds of the two
# workers' JVMs. With these bounds: 46 cycles, 45 + 15 s (session 23, with raised
# C2 thresholds beside them that were not kept); the live heap after the same 28
# job tests 340 -> 276 MB. The suite's wall time did not move outside this VM's
# run-to-run spread (1,082 / 1,125 s). Figures: bench/RESULTS.md, "Test suite".
SESSION_BOUNDS = {
    # Delta keeps a DeltaLog (with its snapshot's cached state) per table path for
    # 60 minutes, up to 10,000 of them; each test writes tables of its own, and a
    # publish reads fewer than 32.
    "spark.databricks.delta.delta.log.cacheSize": "32",
    # What the status store keeps of finished queries, jobs and stages (nothing
    # reads them here; the defaults are 1,000 each and 100,000 tasks).
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "2000",
}


# The session JVM's collector: serial. Its heap holds small, short-lived objects
# (per-query plans, task results of rows in the tens), a live set of a few hundred
# MB, on two cores that the other xdist worker's JVM wants too; G1's concurrent
# marking threads and write barriers cost more CPU than they save pauses here. Five
# small publish pairs in one JVM (tests' settings; /proc utime + stime of the JVM,
# load 1.6-2.7, 6 December): G1 63.5 / 29.6 / 27.1 / 22.0 / 21.7 CPU-s, serial
# 60.8 / 25.0 / 21.8 / 20.4 / 19.0 (-10 %), parallel 58.9 / 27.3 / 23.0 / 20.5 /
# 19.8. Production (jobs/spark.py) keeps the JVM's default (G1): its heaps hold
# millions of rows. Figures: bench/RESULTS.md, "Test suite".
#
# And the JIT's thresholds three times the default: the session JVM never stops
# compiling. Warm small publishes (the 3rd to the 7th in one JVM) each compiled
# about 2,500 more methods in 6-7 s of compiler-thread CPU, a third of the JVM's
# CPU per publish (Spark's and Delta's code base reaching the thresholds method by
# method; classes loaded grew by about 50 per publish). Tripled, a method run a
# few hundred times per publish stays interpreted; the hot ones still reach C2.
# Eight publishes in one JVM: 33,300 compilations in 49 s instead of 47,000 in
# 75-78 s, the JVM's CPU 116.8 against 127.8 / 136.1 CPU-s; ten times the
# thresholds compiled less still but ran slower. Seven Spark-heavy test files
# and tests/docs (23 tests, -n 2), alternating: 369.2 / 357.7 s
# against 384.9 / 372.3 s without (-4 % in each round; 7 December, load 1.7-2.9,
# bench/history/2026-12-07-2-session-36.md).
SESSION_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:CompileThresholdScaling=3"

# Delta's version checksum file (`_delta_log/<version>.crc`, the table's size, file
# count, protocol and metadata after each commit), not written by the session: a
# commit then writes one log file, not two, each a temporary file renamed into
# place, and Hadoop's local file system spawns a `readlink` per renamed path and a
# `chmod` per file it creates (no native library here: about 5 ms of CPU each,
# 1,524 processes in one run of tests/jobs/test_layered_equality.py and
# test_publish.py). Delta reads the log without it; production (jobs/spark.py) and
# the `lb` subprocesses keep writing it, and no test reads it. Those two files, one
# process, alternating: the session JVM's CPU (with its children) 144.3 / 134.9 /
# 151.5 / 152.3 s without it against 153.2 / 157.3 / 154.6 / 161.8 s with it (-2 to
# -14 %; 7 December, load 0.9-2.0, bench/history/2026-12-07-7-session-41.md).
# Removing the remaining processes as well (a file system doing chmod and readlink
# through java.nio, session 42) showed no gain outside the spread, so how much of
# this one's came from the processes rather than the second file is not known
# (bench/history/2026-12-07-8-session-42.md).
NO_CHECKSUM_FILES = {"spark.databricks.delta.writeChecksumFile.enabled": "false"}


def start_spark(warehouse: Path) -> SparkSession:
    """The test session's SparkSession (local[2], Delta, SHUFFLE_PARTITIONS,
    INTERPRETED), its SQL warehouse in ``warehouse`` (the tests use paths, not
    catalog tables: the default ``./spark-warehouse`` would land in whatever the
    working directory is).

    Not -XX:TieredStopAtLevel=1: C1-only JIT made test_recompute + test_periods
    slower, not faster (two runs started together at load ~24: 17 tests in
    864 s with the default JIT, 924 s C1-only).

    :raises jobs.jars.JarsMissing: when the jar cache is empty.
    """
    return get_spark(
        "leaderboard-tests",
        shuffle_partitions=SHUFFLE_PARTITIONS,
        driver_memory="2g",
        conf={
            "spark.sql.warehouse.dir": str(warehouse),
            # Delta's VACUUM lists the table in this many tasks (Spark's default
            # 10000, nearly all empty): 236 / 114 s per VACUUM of a two-file table
            # against 15 / 9 s with 2 (tests/jobs/test_hygiene.py runs two; A/B in
            # one JVM, load 11-17). Spark's parallel file listing (32+ paths) uses it
            # too: the tests' tables are small.
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
            # Adaptive query execution off: with one shuffle partition and rows in
            # the tens it has nothing to coalesce or re-plan, and it runs each query
            # stage as a job of its own (a publish pair: 301 -> 209 Spark jobs).
            # Production (jobs/spark.py) and the `lb` subprocesses keep it on, so
            # tests/drills/test_spark_cluster_publish.py compares segments built
            # with it on (the cluster's driver) against this session's, byte for
            # byte.
            "spark.sql.adaptive.enabled": "false",
            # Before get_spark's spark.driver.extraJavaOptions (the launcher's
            # order), which it leaves as production has it.
            "spark.driver.defaultJavaOptions": SESSION_JAVA_OPTIONS,
            **INTERPRETED,
            **SESSION_BOUNDS,
            **NO_CHECKSUM_FILES,
        },
    )


# The JIT of the cluster test's JVMs (the master, the worker, the driver and its
# executors: tests/drills/cluster_publish.py): C1 only, as for the `lb` subprocesses.
# Each lives for one test (two small publishes); the driver keeps production's
# whole-stage codegen and adaptive execution, which is what the test compares
# with this session's interpreted segments, byte for byte; the JIT level changes
# how fast the same bytecode runs, not what it computes. The test's CPU: 139.1 ->
# 82.2 s (two runs at once, load 2-12; bench/history/2026-12-04-1-session-21.md).
CLUSTER_JAVA_OPTIONS = SUBPROCESS_JAVA_OPTIONS

# One worker daemon hosting two executors (one core each): the publish still runs
# in two executor JVMs besides the driver (shuffles cross JVMs, segment files are
# written by both), one daemon JVM fewer than a worker per executor. Two workers
# are the cluster demo's (`make cluster-demo`, tests/e2e/test_cluster_demo.py).
WORKERS = 1
EXECUTORS = 2
EXECUTOR_MEMORY = "768m"


@dataclass(frozen=True)
class Cluster:
    master_url: str
    env: dict[str, str]


@contextmanager
def start_cluster(root: Path) -> Iterator[Cluster]:
    """A standalone master and ``WORKERS`` worker (jobs.spark_standalone) offering
    ``EXECUTORS`` cores and their memory, its scratch space under ``root``; the
    test fails if they do not start."""
    try:
        with standalone_cluster(
            root,
            workers=WORKERS,
            cores=EXECUTORS,
            memory=f"{EXECUTORS}g",
            daemon_java_options=CLUSTER_JAVA_OPTIONS,
        ) as cluster:
            yield Cluster(cluster.master_url, cluster.env)
    except StandaloneFailed as exc:
        pytest.fail(str(exc))
