"""Close times of every window, award tiers and ranks (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from conf.boards import (
    BoardsConfig,
    BoardsFileError,
    Season,
    board_closes_at,
    board_cutoff_ms,
    boards_for_event,
    load_boards,
    to_ms,
)
from serving.awards import content_hash, rank_board
from speed.late_review import late_boards

pytestmark = pytest.mark.unit


def test_daily_board_closes_at_midnight_utc_plus_lateness() -> None:
    config = load_boards()  # windowLateness PT1H
    specs = {
        s.board: s.cutoff_ms
        for s in boards_for_event(
            config, datetime(2026, 11, 20, 23, 59, tzinfo=UTC), "eu"
        )
    }
    assert specs["daily:2026-11-20:eu"] == to_ms(datetime(2026, 11, 21, 1, tzinfo=UTC))
    # 2026-11-20 is a Friday of ISO week 47: the week ends Monday 2026-11-23.
    assert specs["weekly:2026-W47:global"] == to_ms(
        datetime(2026, 11, 23, 1, tzinfo=UTC)
    )
    assert specs["monthly:2026-11:global"] == to_ms(
        datetime(2026, 12, 1, 1, tzinfo=UTC)
    )
    assert specs["alltime:all:global"] == 0
    assert board_closes_at(config, "daily:2026-12-31:na") == datetime(
        2027, 1, 1, 1, tzinfo=UTC
    )
    assert board_closes_at(config, "monthly:2026-12:global") == datetime(
        2027, 1, 1, 1, tzinfo=UTC
    )
    assert board_closes_at(config, "weekly:2026-W53:global") == datetime(
        2027, 1, 4, 1, tzinfo=UTC
    )
    assert board_closes_at(config, "season:S4:eu") == datetime(
        2026, 12, 1, 1, tzinfo=UTC
    )
    assert board_closes_at(config, "alltime:all:global") is None


def test_window_lateness_is_configurable() -> None:
    config = BoardsConfig.model_validate({"regions": ["eu"], "windowLateness": "PT0S"})
    assert board_closes_at(config, "daily:2026-11-20:eu") == datetime(
        2026, 11, 21, tzinfo=UTC
    )
    with pytest.raises(ValueError, match="windowLateness"):
        BoardsConfig.model_validate({"windowLateness": "-PT1H"})


def test_tiers_validate() -> None:
    with pytest.raises(BoardsFileError, match="exactly one of top or topPercent"):
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "b.yaml"
            path.write_text(
                "seasons:\n- {id: S, start: '2026-01-01T00:00:00Z', "
                "end: '2026-02-01T00:00:00Z', "
                "tiers: [{name: t, top: 1, topPercent: 5}]}\n"
            )
            load_boards(path)


def _season(**tiers: object) -> Season:
    return Season.model_validate(
        {
            "id": "S",
            "start": "2026-01-01T00:00:00Z",
            "end": "2026-02-01T00:00:00Z",
            "tiers": [
                {"name": "champion", "top": 1},
                {"name": "top10", "top": 10},
                {"name": "top10pct", "topPercent": 10},
            ],
        }
    )


def test_ties_at_the_top10_boundary_share_the_tier() -> None:
    # Ranks 1..9 distinct, four players tied at rank 10, then ranks 14..20, then
    # 180 players tied at rank 21: 200 players in all.
    scores = (
        [1000 - i for i in range(9)]
        + [500] * 4
        + [400 - i for i in range(7)]
        + [50] * 180
    )
    players = [f"P{i:03d}" for i in range(len(scores))]
    table = rank_board(pa.array(players), pa.array(scores, pa.int64()), _season())
    ranks = table.column("rank").to_pylist()
    tiers = table.column("tier").to_pylist()
    assert ranks[:14] == list(range(1, 10)) + [10, 10, 10, 10] + [14]
    assert tiers[0] == "champion"
    assert tiers[1:13] == ["top10"] * 12  # all four tied at rank 10 are in
    # 200 players: top 10 % is rank <= 20 (100 * rank / 200 <= 10).
    assert tiers[13:20] == ["top10pct"] * 7
    assert ranks[20] == 21
    assert set(tiers[20:]) == {None}
    # Display order inside a tie is by player id bytes.
    assert table.column("player_id").to_pylist()[9:13] == [
        "P009",
        "P010",
        "P011",
        "P012",
    ]


def test_content_hash_covers_content_not_metadata() -> None:
    season = _season()
    a = content_hash(season, {"season:S:global": "aa", "season:S:eu": "bb"})
    b = content_hash(season, {"season:S:eu": "bb", "season:S:global": "aa"})
    c = content_hash(season, {"season:S:global": "ab", "season:S:eu": "bb"})
    assert a == b != c


def test_late_boards_reads_per_board_status() -> None:
    record = {
        "status": "accepted",
        "result": {
            "boards": [
                {"board": "season:S4:global", "status": "late-review"},
                {"board": "season:S4:eu", "status": "late-review"},
                {"board": "alltime:all:global"},
            ]
        },
    }
    assert late_boards(record, "S4") == ["season:S4:global", "season:S4:eu"]
    assert late_boards(record, "S5") == []
    whole = {"status": "late-review", "result": {"boards": [{"board": "season:S4:eu"}]}}
    assert late_boards(whole, "S4") == ["season:S4:eu"]


def test_seasons_close_at_end_plus_lateness() -> None:
    season = Season.model_validate(
        {
            "id": "S",
            "start": "2026-01-01T00:00:00Z",
            "end": "2026-02-01T00:00:00Z",
            "allowedLateness": "PT2H",
        }
    )
    assert season.cutoff == datetime(2026, 2, 1, tzinfo=UTC) + timedelta(hours=2)


def test_board_cutoff_equals_the_cutoff_events_carry() -> None:
    config = load_boards()
    for moment in (
        datetime(2026, 11, 20, 12, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, tzinfo=UTC),  # its period ends past datetime.max
    ):
        for spec in boards_for_event(config, moment, "eu"):
            if not spec.board.startswith("season:"):
                assert board_cutoff_ms(config, spec.board) == spec.cutoff_ms, spec
