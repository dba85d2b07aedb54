"""Boards file validation and which boards an event feeds."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conf.boards import BoardsFileError, boards_for_event, describe_board, load_boards
from conf.settings import Settings

pytestmark = pytest.mark.unit


def test_default_boards_load() -> None:
    config = load_boards()
    assert config.regions == ["eu", "na"]
    assert config.season("S4") is not None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("regions: [eu, eu]\n", "(root)"),
        (
            "seasons:\n  - id: S1\n    start: nope\n    end: 2026-01-01T00:00:00Z\n",
            "seasons.0.start",
        ),
        (
            "seasons:\n  - id: S1\n    start: 2026-02-01T00:00:00Z\n"
            "    end: 2026-01-01T00:00:00Z\n",
            "seasons.0",
        ),
        (
            "seasons:\n  - id: S1\n    start: 2026-01-01T00:00:00Z\n"
            "    end: 2026-02-01T00:00:00Z\n    aggregation: avg\n",
            "seasons.0.aggregation",
        ),
        (
            "seasons:\n  - id: S1\n    start: 2026-01-01T00:00:00Z\n"
            "    end: 2026-02-01T00:00:00Z\n    rule: v9\n",
            "seasons.0",
        ),
        ("regionz: [eu]\n", "regionz"),
    ],
)
def test_bad_boards_file_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "boards.yaml"
    path.write_text(text)
    with pytest.raises(BoardsFileError, match=re.escape(f"field {field}")):
        load_boards(path)


def test_boards_for_event_windows_and_scopes() -> None:
    config = load_boards()
    boards = [
        s.board
        for s in boards_for_event(
            config, datetime(2026, 11, 30, 23, 59, tzinfo=UTC), "na"
        )
    ]
    assert boards == [
        "season:S4:global",
        "season:S4:na",
        "daily:2026-11-30:global",
        "daily:2026-11-30:na",
        "weekly:2026-W49:global",
        "weekly:2026-W49:na",
        "monthly:2026-11:global",
        "monthly:2026-11:na",
        "alltime:all:global",
        "alltime:all:na",
    ]


def test_iso_week_year_at_new_year() -> None:
    config = load_boards()
    # 2027-01-01 is a Friday: ISO week 53 of 2026.
    boards = [
        s.board
        for s in boards_for_event(config, datetime(2027, 1, 1, tzinfo=UTC), "eu")
    ]
    assert "weekly:2026-W53:global" in boards
    assert not any(b.startswith("season:") for b in boards)


def test_season_end_is_exclusive_and_cutoff_includes_lateness() -> None:
    config = load_boards()
    specs = boards_for_event(config, datetime(2026, 12, 1, tzinfo=UTC), "eu")
    assert not any(s.board.startswith("season:") for s in specs)
    (season,) = [
        s
        for s in boards_for_event(
            config, datetime(2026, 11, 30, 23, 0, tzinfo=UTC), "eu"
        )
        if s.board == "season:S4:eu"
    ]
    assert season.cutoff_ms == int(
        datetime(2026, 12, 1, 1, tzinfo=UTC).timestamp() * 1000
    )


def test_describe_board() -> None:
    config = load_boards()
    assert describe_board(config, "season:S4:eu") == {
        "window": "season",
        "period": "S4",
        "scope": "eu",
        "aggregation": "sum",
        "order": "desc",
        "tieBreak": "player_id",
        "rule": "v1",
    }
    assert describe_board(config, "daily:2026-11-30:global") is not None
    for bad in (
        "season:S9:eu",
        "daily:2026-11:eu",
        "alltime:all:mars",
        "nope",
        "a:b:c:d",
    ):
        assert describe_board(config, bad) is None


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="LB_RATE_LIMIT"):
        Settings(rate_limit="fast")
    with pytest.raises(ValueError, match="LB_HMAC_KEYS"):
        Settings(hmac_keys="nosecret")
    assert Settings(rate_limit="off").rate_limit_bucket is None
    assert Settings(hmac_keys="a:1,b:2").signing_keys == {"a": b"1", "b": b"2"}
    with pytest.raises(ValueError, match="refused"):
        _ = Settings(production=True).signing_keys
    # The local player-token key too (issue 23 item 9), at validation.
    with pytest.raises(ValueError, match="LB_PLAYER_TOKEN_KEY"):
        Settings(production=True, hmac_keys="k:s", admin_keys="a:t")
    own = Settings(
        production=True,
        hmac_keys="k:s",
        admin_keys="a:t",
        player_token_key="an-operators-own-player-token-key-0123",
    )
    assert own.player_token_secret == b"an-operators-own-player-token-key-0123"
