"""silver_contributions at (player, match) granularity (real Spark and Delta): a
data directory whose silver still has the per-board layout of build version 2
publishes (the table is migrated in place, its older versions stay readable by
time travel), and incremental generations on the migrated table equal a full
recompute."""

from __future__ import annotations

from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from jobs.hygiene import TABLES_DOC, parse_tables_doc
from jobs.publish import check_generation, run_publish
from jobs.recompute import CONTRIBUTION_COLUMNS
from jobs.silver import SILVER_CONTRIBUTIONS, read_contributions
from speed.server import RedisServer
from tests.jobs.test_incremental import (
    append_bronze,
    gold_rows,
    log_lines,
    make_settings,
    manifest,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def _history() -> list[dict]:
    out = []
    for i in range(24):
        out.append(
            {
                "player": ["a", "b", "c", "Zed"][i % 4],
                "match": i % 3,
                "revision": [1, 1, 2, 0, 3][i % 5],
                "points": (i * 7) % 6,
                "occurred": [
                    "2026-10-31T23:59:59Z",
                    "2026-11-01T00:00:00Z",
                    "2026-11-16T12:00:00Z",
                ][i % 3],
                "region": ["eu", "na"][i % 2],
                "late": i % 7 == 0,
                "kind": [0, 0, 1, 0, 2, 3][i % 6],
            }
        )
    return out


def _properties(spark: SparkSession, path: Path) -> dict[str, str]:
    detail = DeltaTable.forPath(spark, str(path)).detail().first()
    assert detail is not None
    return dict(detail["properties"])


def test_per_board_silver_is_migrated_and_keeps_history(
    spark: SparkSession, redis_server: RedisServer, tmp_path: Path
) -> None:
    lines = log_lines(_history())
    settings = make_settings(tmp_path, redis_server)
    append_bronze(spark, settings, lines[:12])
    assert run_publish(settings, spark=spark, land=False, bucket_target=2) == "g1"
    path = (settings.delta_dir / SILVER_CONTRIBUTIONS).resolve()
    stored = spark.read.format("delta").load(str(path))
    assert {"partition", "player_id", "match_id", "boards", "generation"} == set(
        stored.columns
    )
    per_board = read_contributions(spark, path).localCheckpoint(eager=True)
    assert per_board.columns == [*CONTRIBUTION_COLUMNS, "generation"]
    assert per_board.count() > stored.count() > 0
    # Silver as build version 2 wrote it: one row per (player, match, board).
    (
        per_board.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .partitionBy("partition")
        .save(str(path))
    )
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('lb.check' = 'kept')")
    old_version = DeltaTable.forPath(spark, str(path)).history(1).first()["version"]
    old_rows = sorted(map(tuple, per_board.collect()))

    append_bronze(spark, settings, lines[12:18])
    assert run_publish(settings, spark=spark, land=False, bucket_target=2) == "g2"
    # Silver was written after g1: never an incremental base; migrated in place.
    assert manifest(settings, "g2")["build"]["mode"] == "full"
    migrated = spark.read.format("delta").load(str(path))
    assert "boards" in migrated.columns and "board" not in migrated.columns
    assert _properties(spark, path)["lb.check"] == "kept"
    assert _properties(spark, path)["delta.enableDeletionVectors"] == "true"
    comments = {f.name: f.metadata.get("comment") for f in migrated.schema.fields}
    doc = parse_tables_doc(TABLES_DOC.read_text())[SILVER_CONTRIBUTIONS]
    assert comments["boards"] == doc.columns["boards"]
    # Time travel to the per-board version reads the rows it held.
    before = spark.read.format("delta").option("versionAsOf", old_version)
    assert sorted(map(tuple, before.load(str(path)).collect())) == old_rows
    # Per-board readers see the same rows whichever layout the table is in.
    assert read_contributions(spark, path).columns == per_board.columns

    # The migrated table is the base of an incremental generation equal to a full
    # recompute of its boundary.
    append_bronze(spark, settings, lines[18:])
    assert run_publish(settings, spark=spark, land=False, bucket_target=2) == "g3"
    assert manifest(settings, "g3")["build"]["mode"] == "incremental"
    check = check_generation(settings, spark, "g3")
    assert check.ok and check.rows > 0, check
    g4 = run_publish(settings, spark=spark, land=False, bucket_target=2, full=True)
    assert gold_rows(spark, settings, "g3") == gold_rows(spark, settings, g4)
