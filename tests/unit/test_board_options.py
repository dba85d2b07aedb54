"""Board options (issue 27): ``aggregation: max`` (alias ``best``) for rolling
windows, ``order: asc`` for seasons and windows, and the one home of a board's
scoring rules (conf.boards.board_rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conf.boards import (
    BoardRules,
    BoardsFileError,
    board_order,
    board_rules,
    boards_for_event,
    describe_board,
    load_boards,
)
from conf.rule_state import describe_replay_board

pytestmark = pytest.mark.unit

NOW = datetime.now(UTC).replace(microsecond=0)
START = (NOW - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
END = (NOW + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
BOARDS = f"""
regions: [eu]
seasons:
  - id: RACE
    start: "{START}"
    end: "{END}"
    order: asc
    aggregation: best
    tieBreak: first_achieved
  - id: PLAIN
    start: "{START}"
    end: "{END}"
windows:
  daily: {{aggregation: best}}
  alltime: {{order: asc, aggregation: max}}
"""


def _load(tmp_path: Path, text: str = BOARDS):  # type: ignore[no-untyped-def]
    path = tmp_path / "boards.yaml"
    path.write_text(text)
    return load_boards(path)


def test_defaults_stay_sum_desc() -> None:
    config = load_boards()
    for board in ("daily:2026-11-30:eu", "alltime:all:global", "season:S4:eu"):
        rules = board_rules(config, board)
        assert (rules.aggregation, rules.order, rules.sign) == ("sum", "desc", 1)
    assert all(
        (s.aggregation, s.order) == ("sum", "desc")
        for s in boards_for_event(config, NOW, "eu")
    )


def test_windows_and_season_options(tmp_path: Path) -> None:
    config = _load(tmp_path)
    day = NOW.strftime("%Y-%m-%d")
    assert board_rules(config, f"daily:{day}:eu") == BoardRules("max", "desc")
    assert board_rules(config, "alltime:all:global") == BoardRules("max", "asc")
    assert board_rules(config, "weekly:2026-W01:eu") == BoardRules()
    race = board_rules(config, "season:RACE:eu")
    assert (race.aggregation, race.order, race.first_achieved) == ("max", "asc", True)
    assert race.sign == -1 and race.orient(17) == -17 and race.orient(-17) == 17
    assert board_rules(config, "season:PLAIN:eu").orient(17) == 17
    # A replay's board has its season's rules under the replay's rule version.
    replay = board_rules(config, "season:RACE@v2:eu")
    assert (replay.order, replay.aggregation, replay.rule) == ("asc", "max", "v2")
    assert board_order(config, "season:RACE:eu") == (True, False)
    specs = {s.board: s for s in boards_for_event(config, NOW, "eu")}
    assert (specs[f"daily:{day}:eu"].aggregation, specs[f"daily:{day}:eu"].sign) == (
        "max",
        1,
    )
    assert (specs["alltime:all:eu"].aggregation, specs["alltime:all:eu"].sign) == (
        "max",
        -1,
    )
    assert specs["season:RACE:global"].order == "asc"
    assert specs["season:PLAIN:global"].order == "desc"


def test_describe_board_shows_order(tmp_path: Path) -> None:
    config = _load(tmp_path)
    described = describe_board(config, "alltime:all:eu")
    assert described is not None
    assert (described["aggregation"], described["order"]) == ("max", "asc")
    season = describe_board(config, "season:RACE:global")
    assert season is not None and season["order"] == "asc"
    assert describe_board(config, "weekly:2026-W01:eu") == {
        "window": "weekly",
        "period": "2026-W01",
        "scope": "eu",
        "aggregation": "sum",
        "order": "desc",
        "tieBreak": "player_id",
        "rule": "v1",
    }
    replay = describe_replay_board(config, "season:RACE@v1:eu")
    assert replay is not None and replay["order"] == "asc"


@pytest.mark.parametrize(
    "bad",
    [
        "windows:\n  daily: {order: up}\n",
        "windows:\n  daily: {aggregation: min}\n",
        "windows:\n  season: {order: asc}\n",
        "windows:\n  daily: {order: asc, extra: 1}\n",
        "seasons:\n  - {id: X, start: '2026-01-01T00:00:00Z',"
        " end: '2026-02-01T00:00:00Z', order: lowest}\n",
    ],
)
def test_bad_options_name_the_field(tmp_path: Path, bad: str) -> None:
    with pytest.raises(BoardsFileError, match="field"):
        _load(tmp_path, bad)


def test_rule_state_is_per_game(tmp_path: Path) -> None:
    """Replays and promotions name internal season ids (issue 26): arena's S4 is
    ``arena~S4``, the game default's stays ``S4`` (a state file from before games
    means the same); one game's promotion leaves the other's S4 alone."""
    from conf.boards import BoardsConfig
    from conf.rule_state import RuleState, effective_boards, namespace_seasons
    from speed.rebuild import Folder, PartitionState

    season = {"id": "S4", "start": START, "end": END, "rule": "v1"}
    config = BoardsConfig.model_validate(
        {
            "games": [
                {"id": "default", "regions": ["eu"], "seasons": [season]},
                {"id": "arena", "regions": ["na"], "seasons": [season]},
            ]
        }
    )
    state = RuleState(replays=[("arena~S4", "v2")], promoted={"arena~S4": "v2"})
    promoted = effective_boards(config, state)
    rules = {g: b.season("S4").rule for g, b in promoted.each_game()}  # type: ignore[union-attr]
    assert rules == {"default": "v1", "arena": "v2"}
    assert board_rules(promoted, "arena~season:S4:na").rule == "v2"
    assert board_rules(promoted, "season:S4:eu").rule == "v1"
    assert [s.id for s in namespace_seasons(promoted, state)] == ["arena~S4@v2"]
    # Arena's replay boards read like its boards; not the game default's region.
    assert describe_replay_board(promoted, "arena~season:S4@v2:na") is not None
    assert describe_replay_board(promoted, "arena~season:S4@v2:eu") is None
    assert describe_replay_board(promoted, "season:S4@v2:eu") is not None
    folder = Folder(promoted, PartitionState(0, 0), rescore=set(state.promoted))
    assert folder.rescored("arena~season:S4:na")
    assert not folder.rescored("season:S4:eu")
    assert (folder.rule("arena~season:S4:na"), folder.rule("season:S4:eu")) == (
        "v2",
        "v1",
    )
    # Without games: the bare ids, as before.
    single = BoardsConfig.model_validate({"regions": ["eu"], "seasons": [season]})
    old = RuleState(replays=[("S4", "v2")], promoted={"S4": "v2"})
    assert effective_boards(single, old).season("S4").rule == "v2"  # type: ignore[union-attr]
    assert [s.id for s in namespace_seasons(single, old)] == ["S4@v2"]
    assert namespace_seasons(single, state) == []  # arena's: no such game here
