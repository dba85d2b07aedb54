"""The pair overlap index of a history step (serving/history.py PairIndex) against
sets: for every player on two random boards (ties, players on one board only),
``newlyAbove`` / ``noLongerAbove`` equal the set differences of the players with a
strictly higher score, whatever the index's block of rows (1 to 4 here, so the
block table and both partial scans count), and one index serves every player of
the pair."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from serving.history import AwardStandings, PairIndexes, rank_change

pytestmark = pytest.mark.unit

PLAYERS = [f"P{i}" for i in range(8)]
board_strategy = st.dictionaries(
    st.sampled_from(PLAYERS), st.integers(0, 3), min_size=1, max_size=len(PLAYERS)
)


def standings(scores: dict[str, int]) -> AwardStandings:
    """Display order (score down, then id), competition ranks."""
    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    ranks = [1 + sum(1 for s in scores.values() if s > score) for _, score in ordered]
    return AwardStandings(
        pa.table(
            {
                "player_id": [p for p, _ in ordered],
                "score": [s for _, s in ordered],
                "rank": ranks,
            }
        )
    )


def above(scores: dict[str, int], player: str) -> set[str]:
    return {q for q, s in scores.items() if s > scores[player]}


@hsettings(max_examples=300, deadline=None)
@given(board_strategy, board_strategy, st.sampled_from([None, 1, 2, 3, 4]))
def test_rank_change_counts_equal_the_set_differences(
    was: dict[str, int], now: dict[str, int], block: int | None
) -> None:
    before, after = standings(was), standings(now)
    indexes = PairIndexes(block=block)
    for player in was.keys() & now.keys():
        b_rank = before.rank_at(before.row_of(player) or 0)
        a_rank = after.rank_at(after.row_of(player) or 0)
        change = rank_change(
            before, b_rank, was[player], after, a_rank, now[player], indexes
        )
        assert change["newlyAbove"] == len(above(now, player) - above(was, player))
        assert change["noLongerAbove"] == len(above(was, player) - above(now, player))
        assert change["to"] - change["from"] == (
            change["newlyAbove"] - change["noLongerAbove"]
        )
    assert indexes.builds <= 1
