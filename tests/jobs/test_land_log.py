"""Landing hands Spark the records in memory, every partition in one commit, and the
landed-through positions come from the statistics in the Delta log, across a
checkpoint and a compaction (real Spark, Delta)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs import spark as spark_module
from jobs.land import (
    extract_landed_through,
    finish_landing,
    land_partitions,
    landed_through_from_log,
    load_bronze,
    log_rows_in_order,
    records_frame,
    transform_records,
)
from speed.partitions import Keys

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


def scanned_through(spark: SparkSession, path: Path) -> dict[int, int]:
    return {
        int(r[0]): int(r[1])
        for r in spark.read.format("delta")
        .load(str(path))
        .groupBy("partition")
        .agg(F.max("position"))
        .collect()
    }


def test_landed_through_from_file_statistics(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = tmp_path / "bronze"
    assert landed_through_from_log(path) is None
    last = {0: 0, 1: 0, 2: 0}
    # 12 landing commits: Delta writes a checkpoint at version 10, so the answer
    # needs both the checkpoint's files and the later JSON commits.
    for i in range(12):
        records = []
        for partition in range(3):
            if (i + partition) % 3 == 2:
                continue  # a partition with nothing new in this commit
            first = last[partition] + 1
            count = 1 + (i + partition) % 3
            records += [record(partition, p) for p in range(first, first + count)]
            last[partition] = first + count - 1
        batch = transform_records(records_frame(spark, records))
        load_bronze(batch, path, sum(last.values()))
    assert (path / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    assert landed_through_from_log(path) == last
    assert extract_landed_through(spark, path) == last
    assert scanned_through(spark, path) == last
    # A blind retry of the last commit (the same version) is dropped.
    load_bronze(
        transform_records(records_frame(spark, records)), path, sum(last.values())
    )
    assert spark.read.format("delta").load(str(path)).count() == sum(last.values())
    # Compaction removes the small files and adds one per partition: the removed
    # files' positions are not counted twice, nor lost.
    DeltaTable.forPath(spark, str(path)).optimize().executeCompaction()
    assert landed_through_from_log(path) == last
    # The in-memory records arrived whole (raw text kept, fields parsed).
    rows = spark.read.format("delta").load(str(path)).where("partition = 0").collect()
    assert sorted(r["position"] for r in rows) == list(range(1, last[0] + 1))
    assert all(json.loads(r["raw"])["position"] == r["position"] for r in rows)
    # Files written without a position statistic: the log cannot tell, the scan does.
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
        "('delta.dataSkippingNumIndexedCols' = '0')"
    )
    last[1] += 1
    batch = transform_records(records_frame(spark, [record(1, last[1])]))
    load_bronze(batch, path, sum(last.values()))
    assert landed_through_from_log(path) is None
    assert extract_landed_through(spark, path) == last


def write_log(client: redis.Redis, partition: int, count: int) -> None:
    """``count`` entries in the partition's log, as the speed layer writes them
    (``XADD <position>-0 r <record>``), pipelined: no HTTP, no Lua."""
    keys = Keys(partition)
    pipe = client.pipeline(transaction=False)
    for position in range(1, count + 1):
        pipe.xadd(keys.log, {"r": record(partition, position)}, id=f"{position}-0")
        if position % 5_000 == 0:
            pipe.execute()
    pipe.set(keys.position, count)
    pipe.execute()


# More than the 10,000 entries one approximate XTRIM removes per call (issue 23:
# 25,000 events and a publish left 15,000 landed entries in one partition).
MANY = 25_000


def test_finish_landing_trims_every_landed_entry(redis_client: redis.Redis) -> None:
    write_log(redis_client, 0, MANY)
    log = Keys(0).log
    finish_landing(redis_client, 0, MANY - 20)
    # Exactly the 20 entries after the landed position stay, none before it.
    assert redis_client.xlen(log) == 20
    first = redis_client.xrange(log, count=1)[0][0]
    assert first == f"{MANY - 19}-0".encode()
    finish_landing(redis_client, 0, MANY)
    assert redis_client.xlen(log) == 0
    assert int(redis_client.get(Keys(0).landed) or 0) == MANY


def test_land_partitions_in_one_commit_leaves_no_landed_entry(
    spark: SparkSession, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "bronze"
    write_log(redis_client, 1, MANY)
    write_log(redis_client, 3, 5)
    landed = land_partitions(spark, redis_client, path, {}, 4)
    assert [(d.partition, d.through, d.rows) for d in landed] == [
        (0, 0, 0),
        (1, MANY, MANY),
        (2, 0, 0),
        (3, 5, 5),
    ]
    assert redis_client.xlen(Keys(1).log) == redis_client.xlen(Keys(3).log) == 0
    assert landed_through_from_log(path) == {1: MANY, 3: 5}
    # Both partitions in one commit (its version: the positions summed).
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert len(history) == 1
    # Past the commit size, a commit per group: here one per partition, and each
    # partition's log trimmed after its own commit.
    for partition in (0, 2):
        write_log(redis_client, partition, 3)
    landed = land_partitions(
        spark, redis_client, path, {1: MANY, 3: 5}, 4, commit_bytes=1
    )
    assert [d.through for d in landed] == [3, MANY, 3, 5]
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()) == 3
    assert extract_landed_through(spark, path) == {0: 3, 1: MANY, 2: 3, 3: 5}
    assert sum(redis_client.xlen(Keys(p).log) for p in range(4)) == 0


def test_versions_read_from_both_forms_of_a_records_result(spark: SparkSession) -> None:
    # apply_event.lua's items arrays and the objects of records written before
    # them (serving/log_records.py) give the same versions; a held record none.
    from jobs.versions import transform_versions

    arrays = {
        "status": "accepted",
        "items": [["daily:d:global", 30, 2], ["season:S3:eu", 0, 7, "late-review"]],
    }
    objects = {
        "status": "accepted",
        "boards": [
            {"board": "daily:d:global", "total": 40, "version": 3},
            {"board": "alltime:all:eu", "total": 40, "version": 12345678901},
        ],
    }
    rows = [
        ("p1", json.dumps({"result": arrays})),
        ("p1", json.dumps({"result": objects})),
        ("p2", json.dumps({"result": {"status": "quarantined", "items": {}}})),
    ]
    bronze = spark.createDataFrame(rows, "player_id string, raw string")
    got = {
        (r["board"], r["player_id"]): r["version"]
        for r in transform_versions(bronze).collect()
    }
    assert got == {
        ("daily:d:global", "p1"): 3,
        ("season:S3:eu", "p1"): 7,
        ("alltime:all:eu", "p1"): 12345678901,
    }


def test_log_rows_in_order_reads_sorted_runs_and_leaves_no_scratch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows given in no order come back in log order, across several runs (three
    positions each); the scratch files are gone after a
    full read and after a reader stops early."""
    monkeypatch.setattr(spark_module, "ROWS_PER_FETCH", 3)
    through = {0: 7, 1: 4, 2: 0}
    positions = [(p, n) for p, last in through.items() for n in range(1, last + 1)]
    shuffled = sorted(positions, key=lambda k: (k[1] * 7919 + k[0] * 31) % 23)
    rows = spark.createDataFrame(
        [(p, n, f"r{p}-{n}") for p, n in shuffled],
        "partition int, position long, raw string",
    ).repartition(3)
    scratch = tmp_path / "run"
    read = [
        (r["partition"], r["position"], r["raw"])
        for r in log_rows_in_order(rows, {}, through, scratch)
    ]
    assert read == [(p, n, f"r{p}-{n}") for p, n in sorted(positions)]
    assert list(scratch.iterdir()) == []
    reader = log_rows_in_order(rows, {}, through, scratch)
    assert next(reader)["position"] == 1
    (runs,) = scratch.iterdir()  # the runs' files, while read
    assert len(list(runs.glob("_run=*"))) == 4  # 11 positions, 3 a run
    reader.close()
    assert list(scratch.iterdir()) == []


def test_rows_in_order_follows_the_spans_and_refuses_a_row_of_none(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Boards (string groups) come back in the spans' order, each by position, as
    ``lb verify`` reads a recompute's rows; a row that belongs to no span stops
    the read with an error instead of being read out of place."""
    monkeypatch.setattr(spark_module, "ROWS_PER_FETCH", 2)
    spans = [("b", 1, 3), ("a", 1, 2), ("é", 1, 1)]
    wanted = [(board, n) for board, _, last in spans for n in range(1, last + 1)]
    rows = spark.createDataFrame(
        sorted(wanted, key=lambda k: (k[1] * 13 + ord(k[0][0])) % 7),
        "board string, position int",
    ).repartition(2)
    scratch = tmp_path / "scratch"
    read = spark_module.rows_in_order(rows, "board", "position", spans, scratch)
    assert [(r["board"], r["position"]) for r in read] == wanted
    stray = rows.unionByName(spark.createDataFrame([("z", 1)], rows.schema))
    with pytest.raises(RuntimeError, match="out of order at board='z'"):
        list(spark_module.rows_in_order(stray, "board", "position", spans, scratch))
    assert list(scratch.iterdir()) == []
