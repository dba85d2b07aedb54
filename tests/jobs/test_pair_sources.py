"""The touched pairs' source records from one scan of the log equal the two-scan
reference (the pairs' own records, then every record sharing one of their
(player, eventId)), both when the delta's ids are all the pairs hold (the one
scan suffices) and when an earlier record of a pair holds another id (the log is
read again for it)."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.incremental_pairs import EVENT, PAIR, transform_pair_sources

pytestmark = pytest.mark.integration

Row = tuple[str, str, str, int]  # player_id, match_id, event_id, position


def reference(history: DataFrame, pairs: DataFrame) -> DataFrame:
    """The former two scans: the pairs' records, then their ids' other records."""
    own = history.join(F.broadcast(pairs), PAIR, "left_semi")
    ids = own.select(*EVENT).distinct()
    sharing = history.join(F.broadcast(ids), EVENT, "left_semi").join(
        F.broadcast(pairs), PAIR, "left_anti"
    )
    return own.unionByName(sharing)


def rows_of(frame: DataFrame) -> list[tuple]:
    return sorted(tuple(r) for r in frame.collect())


def check(spark: SparkSession, earlier: list[Row], delta: list[Row]) -> list[tuple]:
    schema = "player_id string, match_id string, event_id string, position long"
    history = spark.createDataFrame(earlier + delta, schema)
    records = spark.createDataFrame(delta, schema)
    pairs = records.select(*PAIR).distinct()
    delta_ids = records.select(*EVENT).distinct()
    got = rows_of(transform_pair_sources(history, pairs, delta_ids))
    assert got == rows_of(reference(history, pairs))
    return got


def test_new_matches_sharing_an_earlier_id(spark: SparkSession) -> None:
    earlier = [("a", "M0", "E0", 1), ("a", "M1", "E1", 2), ("b", "M0", "E0", 3)]
    # a's new match M2 reuses E0 (first acceptance: M0's earlier record wins).
    got = check(spark, earlier, [("a", "M2", "E0", 4), ("b", "M5", "E9", 5)])
    assert ("a", "M0", "E0", 1) in got and ("a", "M1", "E1", 2) not in got
    assert ("b", "M0", "E0", 3) not in got  # another player's id


def test_a_corrected_match_whose_earlier_id_is_shared(spark: SparkSession) -> None:
    # a's M1 is corrected in the delta; its earlier record's id E1 is also a's
    # M3 record's, which only a second read of the log finds.
    earlier = [("a", "M1", "E1", 1), ("a", "M3", "E1", 2), ("a", "M4", "E4", 3)]
    got = check(spark, earlier, [("a", "M1", "E7", 4)])
    assert ("a", "M3", "E1", 2) in got and ("a", "M4", "E4", 3) not in got


@pytest.mark.parametrize("seed", range(4))
def test_random_logs(spark: SparkSession, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows: list[Row] = [
        (
            f"p{rng.integers(0, 4)}",
            f"M{rng.integers(0, 5)}",
            f"E{rng.integers(0, 6)}",
            position,
        )
        for position in range(40)
    ]
    cut = int(rng.integers(20, 38))
    check(spark, rows[:cut], rows[cut:])
