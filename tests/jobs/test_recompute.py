"""Transforms of jobs/recompute.py on small inline DataFrames."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import BoardsConfig, Season, boards_for_event, to_ms
from jobs.recompute import (
    transform_accepted,
    transform_event_boards,
    transform_first_acceptance,
    transform_recompute,
    transform_within_boundary,
)
from tests.support.jobs import NOW_MS, Ev, bronze, log_records, oracle_totals, ts

pytestmark = pytest.mark.integration

S4 = Season(
    id="S4",
    start=ts("2026-11-01T00:00:00Z"),
    end=ts("2026-12-01T00:00:00Z"),
    allowed_lateness=timedelta(hours=1),
)
BEST = Season(
    id="B1",
    start=ts("2026-11-01T00:00:00Z"),
    end=ts("2026-12-01T00:00:00Z"),
    aggregation="max",
)
CUTOFF_MS = to_ms(S4.cutoff)


def totals_of(spark, events, seasons=(S4,), boundary=None):
    df = bronze(spark, events)
    if boundary is None:
        boundary = dict.fromkeys(range(8), 10**9)
    contributions, totals = transform_recompute(df, boundary, list(seasons))
    return contributions, totals


def as_dict(totals, board):
    rows = totals.where(F.col("board") == board).collect()
    return {r["player_id"]: r["score"] for r in rows}


def test_boards_equal_boards_for_event(spark):
    config = BoardsConfig(regions=["eu", "na"], seasons=[S4, BEST])
    rng = random.Random(7)
    moments = []
    # ISO week edges: the days around every new year from 1999 to 2041.
    for year in range(1999, 2042):
        base = datetime(year, 12, 26, tzinfo=UTC)
        moments += [
            base + timedelta(days=d, milliseconds=rng.randrange(86_400_000))
            for d in range(0, 12, 2)
        ]
        moments.append(datetime(year + 1, 1, 1, tzinfo=UTC) - timedelta(milliseconds=1))
        moments.append(datetime(year + 1, 1, 1, tzinfo=UTC))
    moments += [
        datetime(2026, 1, 1, tzinfo=UTC) + timedelta(milliseconds=rng.randrange(10**11))
        for _ in range(200)
    ]
    # Season edges: start inclusive, end exclusive.
    moments += [
        S4.start,
        S4.start - timedelta(milliseconds=1),
        S4.end,
        S4.end - timedelta(milliseconds=1),
    ]
    rows = [(i, m, rng.choice(["eu", "na"])) for i, m in enumerate(moments)]
    schema = "i int, occurred_at timestamp, region string"
    df = transform_event_boards(spark.createDataFrame(rows, schema), config.seasons)
    got = {
        r["i"]: {(b["board"], b["aggregation"], b["cutoff_ms"]) for b in r["boards"]}
        for r in df.collect()
    }
    for i, moment, region in rows:
        expected = {
            (s.board, s.aggregation, s.cutoff_ms)
            for s in boards_for_event(config, moment, region)
        }
        assert got[i] == expected, moment


def test_first_acceptance_keeps_first_by_position(spark):
    df = bronze(
        spark,
        [
            Ev("P1", "M1", 1, 10, event_id="E1"),
            Ev("P1", "M1", 1, 10, event_id="E1"),
            Ev("P2", "M1", 1, 20, event_id="E1"),
        ],
    )
    got = transform_first_acceptance(df).select("player_id", "event_id", "position")
    expected = spark.createDataFrame(
        [("P1", "E1", 1), ("P2", "E1", 3)],
        "player_id string, event_id string, position long",
    )
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_first_acceptance_many_duplicates_matches_first_by_position(spark):
    # Many repeats, across partitions and players, out of list order: exactly the
    # first record by position of every (player, eventId) stays, with its columns.
    rng = random.Random(11)
    events = [
        Ev(
            f"P{rng.randrange(4)}",
            f"M{rng.randrange(3)}",
            rng.randrange(1, 4),
            rng.randrange(50),
            event_id=f"E{rng.randrange(12)}",
            partition=rng.randrange(2),
        )
        for _ in range(120)
    ]
    # A player's records share one partition (as the speed layer logs them).
    events = [
        Ev(
            e.player,
            e.match,
            e.revision,
            e.points,
            event_id=e.event_id,
            partition=int(e.player[1:]) % 2,
        )
        for e in events
    ]
    df = bronze(spark, events)
    got = {
        (r["player_id"], r["event_id"]): (r["position"], r["points"])
        for r in transform_first_acceptance(df).collect()
    }
    expected: dict[tuple[str, str], tuple[int, int]] = {}
    for r in log_records(events):
        key = (r["event"]["playerId"], r["event"]["eventId"])
        if key not in expected or r["position"] < expected[key][0]:
            expected[key] = (r["position"], r["event"]["points"])
    assert transform_first_acceptance(df).count() == len(expected)
    assert got == expected


def test_accepted_needs_strictly_higher_revision(spark):
    df = bronze(
        spark,
        [
            Ev("P1", "M1", 2, 10),
            Ev("P1", "M1", 1, 99),  # lower: superseded
            Ev("P1", "M1", 2, 99),  # equal: superseded
            Ev("P1", "M1", 3, 5),  # downward correction: accepted
            Ev("P1", "M2", 1, 7),
        ],
    )
    got = transform_accepted(df).select("position", "accepted")
    expected = spark.createDataFrame(
        [(1, True), (2, False), (3, False), (4, True), (5, True)],
        "position long, accepted boolean",
    )
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_boundary_filters_per_partition(spark):
    df = bronze(spark, [Ev("P1", "M1", 1, 1, partition=p) for p in (0, 0, 0, 1, 1)])
    got = transform_within_boundary(df, {0: 2, 1: 0}).select("partition", "position")
    expected = spark.createDataFrame([(0, 1), (0, 2)], "partition int, position long")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_downward_correction_and_duplicate(spark):
    _, totals = totals_of(
        spark,
        [
            Ev("P1", "M1", 1, 30, event_id="E1"),
            Ev("P1", "M1", 1, 30, event_id="E1"),  # duplicate (defensive)
            Ev("P1", "M2", 1, 20),
            Ev("P1", "M1", 2, 5),  # correction downward
            Ev("P1", "M1", 1, 500),  # stale revision: nothing
            Ev("P2", "M1", 1, 40),
        ],
    )
    assert as_dict(totals, "season:S4:global") == {"P1": 25, "P2": 40}
    assert as_dict(totals, "alltime:all:eu") == {"P1": 25, "P2": 40}


def test_correction_moves_match_to_another_board(spark):
    contributions, totals = totals_of(
        spark,
        [
            Ev("P1", "M1", 1, 30, occurred="2026-11-20T10:00:00Z"),
            Ev("P1", "M1", 2, 35, occurred="2026-11-21T10:00:00Z"),
        ],
    )
    # The old day keeps the player with a removed (0) contribution.
    assert as_dict(totals, "daily:2026-11-20:global") == {"P1": 0}
    assert as_dict(totals, "daily:2026-11-21:global") == {"P1": 35}
    assert as_dict(totals, "season:S4:eu") == {"P1": 35}
    removed = contributions.where(F.col("board") == "daily:2026-11-20:eu").collect()
    assert [(r["points"], r["removed"]) for r in removed] == [(0, True)]


def test_correction_moves_match_out_of_season(spark):
    _, totals = totals_of(
        spark,
        [
            Ev("P1", "M1", 1, 30, occurred="2026-11-20T10:00:00Z"),
            Ev("P1", "M1", 2, 30, occurred="2026-10-20T10:00:00Z"),
        ],
    )
    assert as_dict(totals, "season:S4:global") == {"P1": 0}
    assert as_dict(totals, "monthly:2026-10:global") == {"P1": 30}
    assert as_dict(totals, "monthly:2026-11:global") == {"P1": 0}


def test_late_events_do_not_touch_season_boards(spark):
    late = CUTOFF_MS + 1
    _, totals = totals_of(
        spark,
        [
            Ev("P1", "M1", 1, 30),
            Ev("P1", "M1", 2, 99, received_ms=late),  # correction after cutoff
            Ev("P2", "M7", 1, 50, received_ms=late),  # new match after cutoff
            Ev("P3", "M8", 1, 10, received_ms=CUTOFF_MS),  # exactly at cutoff: counts
        ],
    )
    assert as_dict(totals, "season:S4:global") == {"P1": 30, "P3": 10}
    # Windows without a cutoff take every accepted event.
    assert as_dict(totals, "alltime:all:global") == {"P1": 99, "P2": 50, "P3": 10}


def test_late_revision_still_supersedes_later_events(spark):
    late = CUTOFF_MS + 1
    _, totals = totals_of(
        spark,
        [
            Ev("P1", "M1", 1, 30),
            Ev("P1", "M1", 5, 99, received_ms=late),
            Ev("P1", "M1", 3, 7, received_ms=late),  # below the late revision 5
        ],
    )
    assert as_dict(totals, "season:S4:global") == {"P1": 30}
    assert as_dict(totals, "alltime:all:global") == {"P1": 99}


def test_max_aggregation(spark):
    events = [
        Ev("P1", "M1", 1, 30),
        Ev("P1", "M2", 1, 50),
        Ev("P1", "M2", 2, 10),  # best corrected downward: best is now M1
        Ev("P2", "M3", 1, 40),
        Ev("P2", "M3", 2, 40, occurred="2026-10-01T00:00:00Z"),  # moved out
        Ev("P3", "M4", 1, 0),
    ]
    _, totals = totals_of(spark, events, seasons=(BEST,))
    assert as_dict(totals, "season:B1:global") == {"P1": 30, "P2": 0, "P3": 0}
    assert as_dict(totals, "alltime:all:global") == {"P1": 40, "P2": 40, "P3": 0}


def test_totals_equal_oracle_on_random_histories(spark):
    config = BoardsConfig(regions=["eu", "na"], seasons=[S4, BEST])
    rng = random.Random(11)
    events = []
    for _ in range(300):
        player = f"P{rng.randrange(12)}"
        events.append(
            Ev(
                player,
                f"M{rng.randrange(6)}",
                rng.randrange(1, 5),
                rng.randrange(0, 60),
                occurred=rng.choice(
                    [
                        "2026-10-31T23:59:59Z",
                        "2026-11-01T00:00:00Z",
                        "2026-11-29T12:00:00Z",
                        "2026-12-28T00:00:00Z",
                        "2027-01-03T10:00:00Z",
                    ]
                ),
                region=rng.choice(["eu", "na"]),
                received_ms=rng.choice([NOW_MS, CUTOFF_MS + 5]),
                event_id=f"E{rng.randrange(400)}",
                partition=int(player[1:]) % 3,
            )
        )
    df = bronze(spark, events)
    _, totals = transform_recompute(df, {0: 10**9, 1: 10**9, 2: 10**9}, config.seasons)
    got: dict[str, dict[str, int]] = {}
    for r in totals.collect():
        got.setdefault(r["board"], {})[r["player_id"]] = r["score"]
    records = log_records(events)
    assert got == oracle_totals(config, records)


def test_schema_of_totals(spark):
    _, totals = totals_of(spark, [Ev("P1", "M1", 1, 3)])
    assert totals.schema["score"].dataType == T.LongType()


@pytest.mark.parametrize("unrolled", [1, 4])
def test_long_and_short_matches_equal_oracle(spark, monkeypatch, unrolled):
    """Matches with more accepted events than jobs.recompute.UNROLLED take the
    higher-order-function path, shorter ones the compiled one: both equal the oracle
    (revisions up to 9, so many matches have 5+ accepted events; with UNROLLED = 1
    every multi-event match takes the long path)."""
    monkeypatch.setattr("jobs.recompute.UNROLLED", unrolled)
    config = BoardsConfig(regions=["eu", "na"], seasons=[S4, BEST])
    rng = random.Random(23)
    events = []
    for i in range(400):
        player = f"P{rng.randrange(6)}"
        events.append(
            Ev(
                player,
                f"M{rng.randrange(4)}",
                # Mostly rising revisions: long chains of accepted corrections.
                min(9, i // 40 + rng.randrange(0, 3)),
                rng.randrange(0, 60),
                occurred=rng.choice(
                    [
                        "2026-10-31T23:59:59Z",
                        "2026-11-01T00:00:00Z",
                        "2026-11-29T12:00:00Z",
                        "2026-11-30T23:30:00Z",
                        "2027-01-03T10:00:00Z",
                    ]
                ),
                region=rng.choice(["eu", "na"]),
                received_ms=rng.choice([NOW_MS, CUTOFF_MS + 5, CUTOFF_MS - 5]),
                event_id=f"E{i}",
                partition=int(player[1:]) % 3,
            )
        )
    df = bronze(spark, events)
    boundary = {0: 10**9, 1: 10**9, 2: 10**9}
    accepted = transform_accepted(transform_first_acceptance(df)).where("accepted")
    longest = accepted.groupBy("player_id", "match_id").count().agg(F.max("count"))
    assert longest.collect()[0][0] > 4  # the long path is exercised
    _, totals = transform_recompute(df, boundary, config.seasons)
    got: dict[str, dict[str, int]] = {}
    for r in totals.collect():
        got.setdefault(r["board"], {})[r["player_id"]] = r["score"]
    assert got == oracle_totals(config, log_records(events))
