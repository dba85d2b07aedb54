"""Board ids are validated in full: a board that cannot exist is not an empty board."""

from __future__ import annotations

import pytest

from conf.boards import describe_board, load_boards

pytestmark = pytest.mark.unit

VALID = [
    "season:S4:global",
    "season:S4:na",
    "daily:2026-11-30:eu",
    "daily:2024-02-29:global",
    "weekly:2026-W01:global",
    "weekly:2026-W53:eu",  # 2026 has 53 ISO weeks (it starts on a Thursday)
    "monthly:2026-12:global",
    "alltime:all:na",
]
INVALID = [
    "daily:2026-13-45:na",
    "daily:2026-02-29:global",  # not a leap year
    "daily:2026-11-31:eu",
    "daily:2026-00-10:eu",
    "daily:2026-1-05:eu",
    "weekly:2025-W53:global",  # 2025 has 52 ISO weeks
    "weekly:2026-W00:global",
    "weekly:2026-W54:global",
    "monthly:2026-13:global",
    "monthly:2026-00:global",
    "season:S5:global",  # no such season
    "season:S4:mars",  # no such scope
    "daily:2026-11-30:mars",
    "alltime:2026:global",
    "hourly:2026-11-30:eu",
    "daily:2026-11-30",
    "daily:2026-11-30:eu:extra",
    "",
]


@pytest.mark.parametrize("board", VALID)
def test_valid_board_ids(board: str) -> None:
    assert describe_board(load_boards(), board) is not None


@pytest.mark.parametrize("board", INVALID)
def test_invalid_board_ids(board: str) -> None:
    assert describe_board(load_boards(), board) is None
