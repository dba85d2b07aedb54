"""The read policy works a board's description and own ranking out once per boards
config (api/reads/policy.py), and again after a config change (a promotion):
a memo never answers for the config it replaced, nor for a board that cannot
exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.errors import BoardNotFound
from api.reads.policy import FallbackPolicy
from conf.boards import load_boards
from serving.orientation import has_asc_boards
from serving.registry import GenerationRegistry

pytestmark = pytest.mark.unit
DEFAULT = (Path(__file__).resolve().parents[2] / "conf" / "boards.yaml").read_text()
BOARD = "season:S4:global"


def boards(tmp_path: Path, text: str, name: str) -> object:
    path = tmp_path / name
    path.write_text(text)
    return load_boards(path)


def test_a_new_config_is_not_answered_from_the_old_ones_memo(tmp_path: Path) -> None:
    first = boards(tmp_path, DEFAULT, "first.yaml")
    unique = boards(
        tmp_path,
        DEFAULT.replace(
            "    tieBreak: player_id\n",
            "    tieBreak: player_id\n    rank: unique\n    order: asc\n",
        ),
        "unique.yaml",
    )
    without = boards(tmp_path, DEFAULT.replace("id: S4", "id: S5"), "without.yaml")
    policy = FallbackPolicy(first, GenerationRegistry(tmp_path / "segments", 2))  # type: ignore[arg-type]
    assert policy.check(BOARD) is policy.check(BOARD)  # remembered
    assert policy.native_ranking(BOARD) == "competition"
    assert policy.has_asc_boards is False
    policy.use_boards(unique)  # type: ignore[arg-type]
    assert policy.native_ranking(BOARD) == "ordinal"
    assert policy.has_asc_boards is has_asc_boards(unique) is True  # type: ignore[arg-type]
    policy.use_boards(without)  # type: ignore[arg-type]
    with pytest.raises(BoardNotFound):
        policy.check(BOARD)
    for _ in range(2):  # a board that cannot exist is never remembered
        with pytest.raises(BoardNotFound):
            policy.check("season:NOPE:global")
