"""Delta hygiene: comments from docs/TABLES.md, retention that keeps protected
generations' versions readable, schema extended in place (real Spark, Delta)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from jobs.hygiene import (
    MIN_RETENTION_HOURS,
    TABLES_DOC,
    parse_tables_doc,
    retention_hours,
    run_maintenance,
)


@pytest.mark.unit
def test_tables_doc_parses_every_table() -> None:
    docs = parse_tables_doc(TABLES_DOC.read_text())
    assert {"bronze_events", "silver_contributions", "silver_totals"} <= set(docs)
    totals = docs["silver_totals"]
    assert totals.comment.startswith("Total per (board, player)")
    assert {"board", "player_id", "score", "achieved_ms"} <= set(totals.columns)
    assert "`sum`" in docs["silver_contributions"].columns["aggregation"]


@pytest.mark.unit
def test_retention_covers_the_oldest_protected_generation() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    assert retention_hours([], now) == MIN_RETENTION_HOURS
    assert retention_hours([now - timedelta(hours=5)], now) == MIN_RETENTION_HOURS
    old = now - timedelta(days=30, minutes=1)
    assert retention_hours([now, old], now) == 30 * 24 + 1 + 24


@pytest.mark.integration
@pytest.mark.timeout(1800)  # a dozen Delta commits: minutes on a loaded machine
def test_maintenance_documents_and_keeps_time_travel(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "silver_totals"
    first = spark.createDataFrame(
        [("b1", "p1", "sum", 5, 1)],
        "board string, player_id string, "
        "aggregation string, score bigint, matches bigint",
    )
    first.write.format("delta").save(str(path))
    # A later publish adds a column: the table is extended, not replaced.
    second = spark.createDataFrame(
        [("b1", "p1", "sum", 7, 2, 12)],
        "board string, player_id string, "
        "aggregation string, score bigint, matches bigint, achieved_ms bigint",
    )
    second.write.format("delta").mode("overwrite").option("mergeSchema", "true").save(
        str(path)
    )
    protected = [datetime.now(UTC) - timedelta(days=9)]
    report = run_maintenance(spark, tmp_path, protected)
    assert report.retention_hours >= 9 * 24 + 24
    assert set(report.tables) == {"silver_totals"}
    schema = spark.read.format("delta").load(str(path)).schema
    comments = {f.name: f.metadata.get("comment") for f in schema.fields}
    docs = parse_tables_doc(TABLES_DOC.read_text())["silver_totals"]
    assert comments["score"] == docs.columns["score"]
    assert comments["achieved_ms"] == docs.columns["achieved_ms"]
    props = {
        r["key"]: r["value"]
        for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    }
    days = -(-report.retention_hours // 24)
    assert days >= 10
    assert props["delta.deletedFileRetentionDuration"] == f"interval {days} days"
    assert props["delta.logRetentionDuration"] == f"interval {days} days"
    detail = DeltaTable.forPath(spark, str(path)).detail().first()
    assert detail is not None
    assert detail["description"].startswith("Total per (board, player)")
    # The first version is still readable after OPTIMIZE + VACUUM.
    old = spark.read.format("delta").option("versionAsOf", 0).load(str(path))
    # (Same rows and types; the comments added since are metadata.)
    assert_df_equality(old, first, ignore_nullable=True, ignore_metadata=True)
    # A second run changes no comment (idempotent), given the lake as a path
    # relative to Python's working directory (LB_DATA_DIR's default is relative),
    # which is not the JVM's.
    monkeypatch.chdir(tmp_path.parent)
    again = run_maintenance(spark, Path(tmp_path.name), protected, optimize=False)
    assert again.tables["silver_totals"]["commented"] == []
