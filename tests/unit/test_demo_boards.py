"""`lb demo` shows a season board on any date: its boards add a season open now when
the packaged default's seasons have ended (S4 ends on 2026-12-01)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli.demo import DEMO_SEASON, _show_board, demo_boards
from conf.boards import load_boards
from conf.settings import Settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "now",
    [
        datetime(2026, 11, 30, 23, 0, tzinfo=UTC),  # S4's last hour
        datetime(2027, 6, 1, 12, 0, tzinfo=UTC),
        datetime(2031, 2, 28, 0, 30, tzinfo=UTC),
    ],
)
def test_demo_season_is_open_now(tmp_path: Path, now: datetime) -> None:
    path = tmp_path / "boards.yaml"
    path.write_text(demo_boards(now))
    config = load_boards(path)
    season = config.season(DEMO_SEASON)
    assert season is not None
    # Open for the whole demo: events from 29 days back (the dedupe window) to now,
    # and a trickle of new ones for days after.
    assert season.start <= now - timedelta(days=28)
    assert season.end >= now + timedelta(days=29)
    # Everything else is the packaged default (regions, S4, lateness, tiers).
    default = load_boards(None)
    assert config.regions == default.regions
    assert config.season("S4") == default.season("S4")
    assert season.tiers == default.seasons[0].tiers


def test_demo_keeps_the_default_while_its_season_is_open(tmp_path: Path) -> None:
    now = datetime(2026, 11, 10, tzinfo=UTC)
    path = tmp_path / "boards.yaml"
    path.write_text(demo_boards(now))
    assert load_boards(path) == load_boards(None)


def test_demo_shows_the_demo_season_board_today(tmp_path: Path) -> None:
    path = tmp_path / "boards.yaml"
    path.write_text(demo_boards(datetime.now(UTC)))
    board, start = _show_board(Settings(boards_file=path))
    assert board.startswith("season:") and start is not None
