"""The tests' Spark: the one local SparkSession of a test session (the production
JVM flags; C1-only JIT was measured slower, see start_spark), and a standalone
cluster on loopback (one master and two workers, started from the pyspark
distribution's ``bin/spark-class``)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from jobs.spark import JAVA_17, get_spark


def start_spark() -> SparkSession:
    """The test session's SparkSession (local[2], Delta, four shuffle partitions).

    Not -XX:TieredStopAtLevel=1: C1-only JIT made test_recompute + test_periods
    slower, not faster (two runs started together at load ~24: 17 tests in
    864 s with the default JIT, 924 s C1-only).

    :raises jobs.jars.JarsMissing: when the jar cache is empty.
    """
    return get_spark(
        "leaderboard-tests",
        shuffle_partitions=4,
        driver_memory="2g",
        conf={
            # Delta's VACUUM lists the table in this many tasks (Spark's default
            # 10000, nearly all empty): 236 / 114 s per VACUUM of a two-file table
            # against 15 / 9 s with 2 (tests/jobs/test_hygiene.py runs two; A/B in
            # one JVM, load 11-17). Spark's parallel file listing (32+ paths) uses it
            # too: the tests' tables are small.
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        },
    )


SPARK_HOME = Path(pyspark.__file__).parent
WORKERS = 2
START_TIMEOUT = 240


@dataclass(frozen=True)
class Cluster:
    master_url: str
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_HOME"] = str(SPARK_HOME)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_NO_DAEMONIZE"] = "1"
    # Scratch space (shuffle files, fetched jars) of the daemons and executors under
    # the test's directory, removed with it, instead of /tmp/spark-*.
    env["SPARK_LOCAL_DIRS"] = str(root / "scratch")
    # The master and workers only schedule: a small heap each.
    env["SPARK_DAEMON_MEMORY"] = "256m"
    if "JAVA_HOME" not in env and JAVA_17.is_dir():
        env["JAVA_HOME"] = str(JAVA_17)
    return env


@contextmanager
def start_cluster(root: Path) -> Iterator[Cluster]:
    """A standalone master and ``WORKERS`` workers with their scratch space under
    ``root``; stopped (terminated, then killed) on exit."""
    (root / "scratch").mkdir()
    env = cluster_env(root)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        master_log = root / "master.log"
        logs.append(master_log.open("wb"))
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(_free_port()),
                ],
                env=env,
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
                cwd=root,
            )
        )
        for i in range(WORKERS):
            work = root / f"worker{i}"
            work.mkdir()
            logs.append((root / f"worker{i}.log").open("wb"))
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        master_url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(_free_port()),
                        "--work-dir",
                        str(work),
                    ],
                    env=env,
                    stdout=logs[-1],
                    stderr=subprocess.STDOUT,
                    cwd=root,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            text = master_log.read_text(errors="replace")
            if len(re.findall(r"Registering worker", text)) >= WORKERS:
                break
            dead = [p.args[1] for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                pytest.fail(
                    f"standalone cluster did not start ({dead}): {text[-2000:]}"
                )
            time.sleep(0.2)
        yield Cluster(master_url, env)
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for fh in logs:
            fh.close()
