"""The cluster demo's season and oracle (fast; the whole demo runs in the slow
tests/e2e/test_cluster_demo.py): its boards file is valid for the service, its
events are valid for the API, and its offline ranking is the contract's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli.cluster_demo import SEASON, boards_file, expected_ranking, season_events
from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.events import validate_event

pytestmark = pytest.mark.unit


def test_the_demo_season_loads_and_closes_at_its_end(tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    config = load_boards(
        boards_file(tmp_path / "b.yaml", now - timedelta(hours=1), now)
    )
    (season,) = config.seasons
    assert season.id == SEASON and season.cutoff == now
    assert [t.name for t in season.tiers] == ["champion", "top10"]


def test_the_demo_events_are_valid_and_reproducible(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    boards = load_boards(
        boards_file(tmp_path / "b.yaml", now - timedelta(hours=1), now)
    )
    at = now - timedelta(minutes=5)
    events = season_events(30, 200, at)
    assert events == season_events(30, 200, at)
    assert len({e["eventId"] for e in events}) == 200
    rules = default_registry()
    for e in events:
        normalized = validate_event(e, Settings(rate_limit="off"), boards, now, rules)
        assert normalized.event.playerId == e["playerId"]


def test_the_offline_ranking_is_competition_with_player_id_ties() -> None:
    events = [
        {"playerId": p, "result": {"points": pts}}
        for p, pts in [("b", 5), ("a", 5), ("c", 9), ("d", 1), ("c", -4)]
    ]
    assert expected_ranking(events) == [
        (1, "a", 5),
        (1, "b", 5),
        (1, "c", 5),
        (4, "d", 1),
    ]
