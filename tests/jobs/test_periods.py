"""Board ids are formatted once (conf.periods): Spark and the speed layer agree,
years included, also before year 1000 (issue 7, item 7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from conf.boards import BoardsConfig, boards_for_event, to_ms
from conf.periods import period_ids
from jobs.recompute import board_columns

pytestmark = pytest.mark.integration

EDGES = [
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1, 1, 7, 23, 59, 59, tzinfo=UTC),
    datetime(9, 12, 31, 12, tzinfo=UTC),
    datetime(999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
    datetime(1000, 1, 1, tzinfo=UTC),
    datetime(1582, 10, 15, tzinfo=UTC),  # Gregorian reform: both layers proleptic
    datetime(2020, 12, 31, tzinfo=UTC),  # ISO 2020-W53
    datetime(2021, 1, 3, 23, 59, tzinfo=UTC),  # still ISO 2020-W53
    datetime(2026, 12, 28, tzinfo=UTC),  # ISO 2026-W53
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
]


def test_python_periods_are_zero_padded() -> None:
    assert period_ids(datetime(1, 1, 1, tzinfo=UTC)) == [
        ("daily", "0001-01-01"),
        ("weekly", "0001-W01"),
        ("monthly", "0001-01"),
        ("alltime", "all"),
    ]
    offset = datetime(2026, 11, 30, 23, 30, tzinfo=UTC).astimezone()
    assert period_ids(offset)[0] == ("daily", "2026-11-30")


def test_spark_and_speed_layer_name_the_same_boards(spark) -> None:  # type: ignore[no-untyped-def]
    config = BoardsConfig(regions=["eu"])
    moments = EDGES + [m - timedelta(milliseconds=1) for m in EDGES[1:]]
    rows = [(i, to_ms(m), "eu") for i, m in enumerate(moments)]
    df = spark.createDataFrame(rows, "i int, ms long, region string").withColumn(
        "boards", board_columns(F.col("ms"), F.col("region"), [])
    )
    got = {r["i"]: {b["board"] for b in r["boards"]} for r in df.collect()}
    for i, moment, region in [(i, moments[i], "eu") for i, *_ in rows]:
        expected = {s.board for s in boards_for_event(config, moment, region)}
        assert got[i] == expected, moment
    assert "daily:0001-01-01:global" in got[0]
