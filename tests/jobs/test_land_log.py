"""Landing hands Spark the records in memory, and the landed-through position comes
from the Delta log's landing transactions, across a checkpoint (real Spark, Delta)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.land import (
    extract_landed_through,
    landed_through_from_log,
    load_bronze,
    records_frame,
    transform_records,
)

pytestmark = pytest.mark.integration


def record(partition: int, position: int) -> bytes:
    body = {
        "partition": partition,
        "position": position,
        "receivedAtMs": 1_764_000_000_000,
        "event": {
            "eventId": f"E{partition}-{position}",
            "playerId": f"p{position % 3}",
            "matchId": "M1",
            "sourceRevision": 1,
            "occurredAt": "2026-11-20T10:00:00Z",
            "region": "eu",
            "points": position,
        },
    }
    return json.dumps(body).encode()


def test_landed_through_from_txn_actions(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "bronze"
    assert landed_through_from_log(path) is None
    last = {0: 0, 1: 0}
    # 12 landing commits: Delta writes a checkpoint at version 10, so the answer
    # needs both the checkpoint's txn column and the later JSON commits.
    for i in range(12):
        partition = i % 2
        first = last[partition] + 1
        count = 1 + i % 3
        records = [record(partition, p) for p in range(first, first + count)]
        batch = transform_records(records_frame(spark, records))
        load_bronze(batch, path, partition, first + count - 1)
        last[partition] = first + count - 1
    assert (path / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    assert landed_through_from_log(path) == last
    assert extract_landed_through(spark, path) == last
    scanned = {
        int(r[0]): int(r[1])
        for r in spark.read.format("delta")
        .load(str(path))
        .groupBy("partition")
        .agg(F.max("position"))
        .collect()
    }
    assert scanned == last
    # The in-memory records arrived whole (raw text kept, fields parsed).
    rows = spark.read.format("delta").load(str(path)).where("partition = 0").collect()
    assert sorted(r["position"] for r in rows) == list(range(1, last[0] + 1))
    assert all(json.loads(r["raw"])["position"] == r["position"] for r in rows)
