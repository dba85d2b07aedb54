"""Competition rank and display position (jobs/rank.py)."""

from __future__ import annotations

import random

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from jobs.rank import transform_rank, transform_sorted_slices
from tests.support.jobs import oracle_ranking

pytestmark = pytest.mark.integration

SCHEMA = "board string, player_id string, score long"
OUT = "board string, position long, rank long, player_id string, score long"


def test_competition_rank_and_display_order(spark):
    totals = spark.createDataFrame(
        [
            ("b", "P4", 880),
            ("b", "P2", 900),
            ("b", "P1", 920),
            ("b", "P3", 900),
            ("c", "Z", 1),
        ],
        SCHEMA,
    )
    expected = spark.createDataFrame(
        [
            ("b", 1, 1, "P1", 920),
            ("b", 2, 2, "P2", 900),
            ("b", 3, 2, "P3", 900),
            ("b", 4, 4, "P4", 880),
            ("c", 1, 1, "Z", 1),
        ],
        OUT,
    )
    assert_df_equality(
        transform_rank(totals, 2), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_ties_at_top_n_boundary_and_byte_order(spark):
    # "Z" < "a" < "é" in UTF-8 byte order; top 2 is two positions, not all ties.
    totals = spark.createDataFrame(
        [("b", "a", 50), ("b", "é", 50), ("b", "Z", 50), ("b", "x", 60)], SCHEMA
    )
    got = transform_rank(totals, 3).where(F.col("position") <= 2)
    expected = spark.createDataFrame([("b", 1, 1, "x", 60), ("b", 2, 2, "Z", 50)], OUT)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_ties_spanning_spark_partitions(spark):
    rng = random.Random(3)
    rows = []
    for board in ("b1", "b2", "b3"):
        for i in range(120):
            # Few distinct scores: every tie group is large.
            rows.append((board, f"P{i:03d}", rng.choice([0, 10, 20, 30])))
    totals = spark.createDataFrame(rows, SCHEMA).repartition(5)
    sliced = transform_sorted_slices(totals, 6)
    spans = (
        sliced.groupBy("board", "score")
        .agg(F.countDistinct("_part").alias("n"))
        .where(F.col("n") > 1)
        .count()
    )
    assert spans > 0, "the test needs tie groups that span Spark partitions"
    expected = []
    for board in ("b1", "b2", "b3"):
        scores = {p: s for b, p, s in rows if b == board}
        expected += [(board, *row) for row in oracle_ranking(scores)]
    assert_df_equality(
        transform_rank(totals, 6),
        spark.createDataFrame(expected, OUT),
        ignore_row_order=True,
        ignore_nullable=True,
    )
