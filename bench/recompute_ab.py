"""Paired A/B of the full recompute: ``jobs/recompute.py`` of a git revision (A)
against the working tree's (B), on a kept ``bench.publish`` data directory.

    python -m bench.publish --players 100000 --events 1000000 --no-duckdb \
        --data-dir /tmp/lb-ab --keep
    python -m bench.recompute_ab --data-dir /tmp/lb-ab --before 66c46e7 --rounds 2

Per round and variant (alternating in one Spark session, so the machine's load
hits both alike): the contributions of all of bronze (``transform_recompute``,
written to a ``noop`` sink: the transforms without the Delta write) and the totals
of the kept ``silver_contributions`` table (``transform_totals``), each timed with
the driver's wall clock and the driver JVM's CPU time (local mode: the tasks').
Then both variants' contributions and totals are compared row for row
(``exceptAll`` both ways).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.harness import loadavg_text


def module_at(revision: str) -> ModuleType:
    """``jobs/recompute.py`` as it was at ``revision``, imported under another name."""
    source = subprocess.run(
        ["git", "show", f"{revision}:jobs/recompute.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "recompute_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("recompute_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["recompute_before"] = module
    spec.loader.exec_module(module)
    return module


def task_cpu_ms(spark: SparkSession) -> float:
    """CPU time (user + system) of the whole driver JVM so far, from /proc: in local
    mode the tasks run in it (with GC, JIT, planning), and other processes' load
    does not count."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def timed(spark: SparkSession, frame: DataFrame) -> dict[str, float]:
    before = task_cpu_ms(spark)
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return {
        "wall_s": round(time.perf_counter() - started, 2),
        "cpu_s": round((task_cpu_ms(spark) - before) / 1000, 2),
    }


def differences(a: DataFrame, b: DataFrame) -> tuple[int, int]:
    return a.exceptAll(b).count(), b.exceptAll(a).count()


def log_boundary(bronze: DataFrame) -> dict[int, int]:
    """Each log partition's last position in ``bronze``: the boundary of all of it."""
    return {
        int(r[0]): int(r[1])
        for r in bronze.groupBy("partition").agg({"position": "max"}).collect()
    }


def contributions_of(
    module: ModuleType,
    bronze: DataFrame,
    boundary: dict[int, int],
    boards: Any,
    registry: Any,
) -> DataFrame:
    """``module``'s contributions of ``bronze`` under the packaged boards (the
    recompute's arguments as ``jobs.build`` passes them)."""
    frame, _ = module.transform_recompute(
        bronze,
        boundary,
        boards.seasons,
        window_lateness_ms=boards.window_lateness_ms,
        window_rule=boards.rule,
        registry=registry,
    )
    return frame


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--before", required=True, help="git revision of variant A")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--log-partitions",
        type=int,
        default=None,
        help="only bronze's log partitions below this (a smaller, quicker sample)",
    )
    args = ap.parse_args()

    from conf.boards import load_boards
    from conf.rules import default_registry
    from jobs import recompute as after
    from jobs.spark import get_spark

    before = module_at(args.before)
    boards = load_boards()
    spark = get_spark("bench-recompute-ab")
    delta = args.data_dir / "lb" / "delta"
    bronze = spark.read.format("delta").load(str(delta / "bronze_events"))
    silver = spark.read.format("delta").load(str(delta / "silver_contributions"))
    silver = silver.drop("generation")
    if args.log_partitions is not None:
        bronze = bronze.where(F.col("partition") < args.log_partitions)
        silver = silver.where(F.col("partition") < args.log_partitions)
    boundary = log_boundary(bronze)
    registry = default_registry()

    def contributions(module: ModuleType) -> DataFrame:
        return contributions_of(module, bronze, boundary, boards, registry)

    report: dict = {"before": args.before, "load_start": loadavg_text(), "rounds": []}
    for _ in range(args.rounds):
        row: dict = {}
        for name, module in (("before", before), ("after", after)):
            row[f"contributions_{name}"] = timed(spark, contributions(module))
            row[f"totals_{name}"] = timed(spark, module.transform_totals(silver))
        row["load"] = loadavg_text()
        print(json.dumps(row), flush=True)
        report["rounds"].append(row)
    report["contributions_diff"] = differences(
        contributions(before), contributions(after)
    )
    report["totals_diff"] = differences(
        before.transform_totals(silver), after.transform_totals(silver)
    )
    report["rows"] = {"bronze": bronze.count(), "silver": silver.count()}
    report["load_end"] = loadavg_text()
    spark.stop()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
