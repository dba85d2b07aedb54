"""The ingest bench's two-game shape (issue 26: ingest with two games within 5 % of
one): a valid ``games:`` file whose games have the one-game file's boards, and the
game-scoped write paths the bench spreads its batches over."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench.harness import bench_boards_config, bench_games, score_path
from conf.boards import BoardsConfig

pytestmark = pytest.mark.unit


def test_two_games_each_have_the_one_game_boards() -> None:
    now = datetime.now(UTC)
    one = BoardsConfig.model_validate(bench_boards_config(now))
    two = BoardsConfig.model_validate(bench_boards_config(now, games=2))
    assert two.game_ids == ["game1", "game2"]
    for game in bench_games(2):
        section = two.game(game)
        assert section is not None
        assert section.seasons == one.seasons
        assert section.regions == one.regions


def test_write_paths_per_game() -> None:
    assert score_path(None, batch=True) == "/v1/score-events:batch"
    assert score_path("game2", batch=False) == "/v1/games/game2/score-events"
    assert bench_games(0) == []
