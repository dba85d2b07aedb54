"""The Spark mirror of the scoring rules (jobs/rules.py) equals conf/rules.py."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.rules import RULE_VERSIONS, Implausible, RuleInputError, default_registry
from jobs.rules import points_under, rule_column

pytestmark = pytest.mark.integration

FIELDS = ("points", "placement", "kills", "durationSeconds")
EDGES = {
    "points": [None, -1, 0, 1, 1_000_000, 1_000_001],
    "placement": [None, 0, 1, 2, 20, 21, 100, 101],
    "kills": [None, -1, 0, 1, 29, 35, 50, 51],
    "durationSeconds": [None, 59, 60, 119, 120, 900, 3600, 3601],
}


def _records() -> list[tuple[int | None, ...]]:
    rng = random.Random(7)
    rows = [tuple(rng.choice(EDGES[f]) for f in FIELDS) for _ in range(400)]
    rows.append((30, 1, 3, 900))
    return rows


def _python(version: str, row: tuple[int | None, ...]) -> int | None:
    rule = default_registry().get(version)
    try:
        return rule.score(dict(zip(FIELDS, row, strict=True)))
    except RuleInputError:
        return None
    except Implausible:
        # Refused by the API, so never recorded; the formula still defines it.
        values = {f: v for f, v in zip(FIELDS, row, strict=True) if v is not None}
        return rule.formula(values)


def test_rule_columns_equal_python_rules(spark: SparkSession) -> None:
    schema = T.StructType([T.StructField(f, T.LongType()) for f in FIELDS])
    rows = _records()
    df = spark.createDataFrame(rows, schema).withColumn(
        "i", F.monotonically_increasing_id()
    )
    record = F.struct(*[F.col(f) for f in FIELDS])
    registry = default_registry()
    got = (
        df.select(
            "i", *[rule_column(registry, v, record).alias(v) for v in RULE_VERSIONS]
        )
        .orderBy("i")
        .collect()
    )
    for version in RULE_VERSIONS:
        expected = [_python(version, row) for row in rows]
        assert [r[version] for r in got] == expected, version
    # The premise: both outcomes (scored and unscorable) occur for every rule.
    for version in RULE_VERSIONS:
        values = [r[version] for r in got]
        assert None in values and any(v is not None for v in values)


def test_points_under_prefers_recorded_scores(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [("v1", {"v1": 7}, 30), ("v2", {"v1": 7}, 30), ("v2", None, 30)],
        "rule string, scores map<string,bigint>, points bigint",
    )
    record = F.struct(
        F.col("points"),
        F.lit(1).cast("bigint").alias("placement"),
        F.lit(3).cast("bigint").alias("kills"),
        F.lit(900).cast("bigint").alias("durationSeconds"),
    )
    out = df.select(
        points_under(default_registry(), F.col("rule"), F.col("scores"), record)
    ).collect()
    # Recorded v1 score wins over points; v2 is computed from the record (145).
    assert [r[0] for r in out] == [7, 145, 145]
