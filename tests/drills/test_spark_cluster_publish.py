"""The publish on a Spark standalone cluster (a master and a worker with two
executors on loopback, from the pyspark distribution) produces the same generations
as local mode: the segment files are written by executors in other JVMs/processes,
silver is merged there.

In ``make drills``, not ``make test``: like the other drills it deploys processes of
its own (five JVMs: a master, a worker, two executors and the driver) and takes
minutes of the machine's two cores; CI runs it with them (.ci/run)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.publish import run_publish
from speed.server import RedisServer
from tests.support.incremental import (
    OCCURRED,
    append_bronze,
    log_lines,
    make_settings,
    manifest,
)
from tests.support.spark import (
    CLUSTER_JAVA_OPTIONS,
    EXECUTOR_MEMORY,
    EXECUTORS,
    Cluster,
)

# Five JVMs (master, worker, two executors, the driver) besides the tests' own
# session; with a worker per executor (six JVMs) 576 s on the 2-core machine shared
# at load 12-16 (bench/RESULTS.md): a timeout for such a machine.
pytestmark = [pytest.mark.drills, pytest.mark.integration, pytest.mark.timeout(1500)]
REPO = Path(__file__).resolve().parents[2]

HISTORY = [
    {
        "player": p,
        "match": m,
        "revision": r,
        "points": pts,
        "occurred": OCCURRED[o],
        "region": reg,
        "late": late,
        "kind": kind,
    }
    for p, m, r, pts, o, reg, late, kind in [
        ("a", 0, 1, 5, 1, "eu", False, 0),
        ("b", 0, 1, 3, 2, "na", False, 0),
        ("c", 1, 1, 4, 0, "eu", False, 0),
        ("Zed", 0, 2, 2, 3, "na", False, 2),
        ("b", 0, 2, 1, 2, "na", False, 0),  # correction down
        ("a", 1, 1, 5, 4, "eu", True, 0),  # late
        ("Zed", 0, 2, 2, 3, "na", False, 3),  # release
        ("c", 1, 1, 4, 0, "eu", False, 1),  # duplicate
    ]
]


def test_cluster_publish_equals_local(
    spark: SparkSession, spark_cluster: Cluster, redis_server: RedisServer
) -> None:
    lines = log_lines(HISTORY)
    batches = [lines[:4], lines[4:]]
    with tempfile.TemporaryDirectory(prefix="cluster-") as tmp:
        root = Path(tmp)
        remote = make_settings(root / "remote", redis_server)
        local = make_settings(root / "local", redis_server)
        config = {
            "master": spark_cluster.master_url,
            "redis_url": redis_server.url,
            "data_dir": str(remote.data_dir),
            "boards_file": str(remote.boards_file),
            "batches": batches,
            "executors": EXECUTORS,
            "executor_memory": EXECUTOR_MEMORY,
            "java_options": CLUSTER_JAVA_OPTIONS,
        }
        # The cluster's driver runs in its own process; the local-mode reference
        # publishes run meanwhile in this one (the cluster's JVMs mostly wait on
        # each other's start and scheduling round trips at this size).
        # Its output goes to files: a pipe nobody reads during the local publishes
        # would fill with Spark's log and stall it.
        out_path, err_path = root / "driver.out", root / "driver.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            driver = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.drills.cluster_publish",
                    json.dumps(config),
                ],
                cwd=REPO,
                env=spark_cluster.env,
                stdout=out,
                stderr=err,
            )
            try:
                for batch in batches:
                    append_bronze(spark, local, batch)
                    run_publish(local, spark=spark, land=False, bucket_target=2)
                driver.wait(timeout=2000)
            finally:
                if driver.poll() is None:
                    driver.kill()
                    driver.wait()
        assert driver.returncode == 0, err_path.read_text(errors="replace")[-4000:]
        report = json.loads(out_path.read_text().strip().splitlines()[-1])
        assert report["generations"] == ["g1", "g2"]
        # The driver's block manager and both executors.
        assert report["executors"] == 1 + EXECUTORS
        assert manifest(remote, "g2")["build"]["mode"] == "incremental"
        for generation in ("g1", "g2"):
            ours, theirs = manifest(local, generation), manifest(remote, generation)
            assert ours["boards"] == theirs["boards"]
            for meta in ours["boards"].values():
                name = meta["file"]
                assert (local.segments_dir / generation / name).read_bytes() == (
                    remote.segments_dir / generation / name
                ).read_bytes()
