"""A shadowed player's own snapshot window: the hidden player is put back in place
(pure logic over a real segment written by serving's writer)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from api.reads import standing_in, window_entries
from serving.files import atomic_write_text
from serving.manifest import MANIFEST_FILE, build_manifest
from serving.registry import GenerationRegistry
from serving.segments import BoardSegment, write_hidden, write_segments

PUBLIC = [("a", 50), ("b", 40), ("c", 40), ("d", 30)]

pytestmark = pytest.mark.unit


def segment(tmp_path: Path, unique: bool, hidden: tuple[str, int]) -> BoardSegment:
    directory = tmp_path / "g1"
    directory.mkdir()
    table = pa.table(
        {
            "board": ["B"] * len(PUBLIC),
            "player_id": [p for p, _ in PUBLIC],
            "score": pa.array([s for _, s in PUBLIC], pa.int64()),
        }
    )
    boards = write_segments(table, directory, 2, {"B": (False, unique)})
    write_hidden([("B", *hidden)], directory, boards)
    text = build_manifest("g1", datetime.now(UTC), {0: 1}, boards)
    atomic_write_text(directory / MANIFEST_FILE, text)
    board = GenerationRegistry(tmp_path, 1).get(None).board("B")
    assert board is not None
    return board


def oracle(players: list[tuple[str, int]], unique: bool) -> list[dict[str, object]]:
    order = sorted(players, key=lambda kv: (-kv[1], kv[0]))
    return [
        {
            "position": i + 1,
            "rank": i + 1 if unique else 1 + sum(1 for _, s in order if s > score),
            "playerId": p,
            "score": score,
        }
        for i, (p, score) in enumerate(order)
    ]


@pytest.mark.parametrize("unique", [False, True])
@pytest.mark.parametrize("hidden", [("bb", 40), ("z", 60), ("x", 10), ("c0", 45)])
def test_hidden_player_window_equals_the_board_with_it(
    tmp_path: Path, unique: bool, hidden: tuple[str, int]
) -> None:
    board = segment(tmp_path, unique, hidden)
    me = standing_in(board, hidden[0], own=True)
    assert me is not None and me.hidden
    assert standing_in(board, hidden[0], own=False) is None
    want = oracle([*PUBLIC, hidden], unique)
    entries, _, _ = window_entries(board, me, hidden[0], radius=10)
    assert entries == want
    mine = next(e for e in want if e["playerId"] == hidden[0])
    assert (me.row + 1, me.rank, me.score) == (
        mine["position"],
        mine["rank"],
        hidden[1],
    )
    # A radius-1 window is the oracle's slice around the player.
    i = int(mine["position"]) - 1
    small, _, _ = window_entries(board, me, hidden[0], radius=1)
    assert small == want[max(0, i - 1) : i + 2]
