"""Compact record encodings (speed/records.py, speed/partitions.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from speed.partitions import Keys
from speed.records import event_periods, long_board, short_board
from speed.store import decode_result

MOMENT = datetime(2026, 11, 20, 10, tzinfo=UTC)


def test_boards_of_the_events_periods_are_short() -> None:
    periods = event_periods(MOMENT)
    assert short_board("daily:2026-11-20:eu", periods) == "d:eu"
    assert short_board("weekly:2026-W47:global", periods) == "w:global"
    assert short_board("monthly:2026-11:na", periods) == "m:na"
    assert short_board("alltime:all:global", periods) == "a:global"
    # Another day (a correction moved the match away) and seasons stay whole.
    assert short_board("daily:2026-11-19:eu", periods) == "daily:2026-11-19:eu"
    assert short_board("season:S4:global", periods) == "season:S4:global"


@given(
    window=st.sampled_from(["daily", "weekly", "monthly", "alltime", "season"]),
    period=st.sampled_from(["2026-11-20", "2026-W47", "2026-11", "all", "S4", "x"]),
    scope=st.sampled_from(["global", "eu", "na", "a:b"]),
)
def test_short_and_long_board_round_trip(window: str, period: str, scope: str) -> None:
    periods = event_periods(MOMENT)
    board = f"{window}:{period}:{scope}"
    assert long_board(short_board(board, periods), periods) == board


def test_decode_expands_short_boards() -> None:
    body = decode_result(
        b"accepted|3|9|d:eu,30,1;season:S4:global,40,2,late-review",
        "E",
        "P",
        event_periods(MOMENT),
    )
    assert [b["board"] for b in body["boards"]] == [
        "daily:2026-11-20:eu",
        "season:S4:global",
    ]


def test_record_keys_are_short_and_distinct() -> None:
    keys = Keys(3)
    long_ids = ("player-" + "x" * 57, "event-" + "y" * 58)
    assert len(keys.dedupe(*long_ids)) == len("lb:{p3}:ev:") + 16
    assert keys.dedupe("a:b", "c") != keys.dedupe("a", "b:c")
    assert keys.contribution("a:b", "c") != keys.contribution("a", "b:c")
