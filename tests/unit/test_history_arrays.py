"""The per-board arrays and the vectorised diff of serving/history.py against the
segment's own look-ups and the per-row dict diff they replace: random boards
written with the production writers (``write_segments``, ``write_layer_over``:
ties, ``rank: unique`` and ``first_achieved`` boards, ids sharing long prefixes,
non-ASCII ids, empty boards, the newer board as a layer over the older), every
player's row and rank, absent ids, and every diff cut to every limit, with the
kept first rows forced small so ties at the cut are exercised."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from serving.history import BoardArrays, Kept, PairDiff, PairIndexes
from serving.layers import is_layered, load_board, write_layer_over
from serving.segments import BoardSegment, write_segments

pytestmark = pytest.mark.unit
BOARD = "season:S4:global"

# Few letters and long shared stems: ids that agree on their first 8 bytes past
# the board's common prefix, ids that are prefixes of others, multi-byte UTF-8.
ids_strategy = st.builds(
    lambda stem, tail: stem + tail,
    st.sampled_from(
        ["", "P", "player-0000", "player-00000000x", "é", "ab\u00e9cdefgh"]
    ),
    st.text(alphabet="ab\u00e9\U0001f600", min_size=0, max_size=10),
).filter(bool)
board_strategy = st.dictionaries(
    ids_strategy, st.integers(0, 4), min_size=0, max_size=14
)
order_strategy = st.sampled_from(["default", "unique", "first_achieved"])


def segment_of(
    directory: Path,
    scores: dict[str, int],
    order: str,
    parent: tuple[Path, dict[str, Any]] | None = None,
) -> tuple[BoardSegment | None, dict[str, Any] | None]:
    """The board written as the publisher writes it (as a layer over ``parent``,
    the previous generation's directory and board entry, when given and the
    layer writer takes it), then mapped; (None, None) when it has no rows."""
    achieved = {p: sum(p.encode()) % 5 for p in scores}
    timed = order == "first_achieved"
    key = (
        (lambda kv: (-kv[1], achieved[kv[0]], kv[0].encode()))
        if timed
        else (lambda kv: (-kv[1], kv[0].encode()))
    )
    rows = sorted(scores.items(), key=key)
    columns = {
        "player_id": pa.array([p for p, _ in rows], pa.string()),
        "score": pa.array([s for _, s in rows], pa.int64()),
        "achieved_ms": pa.array([achieved[p] for p, _ in rows], pa.int64()),
    }
    directory.mkdir()
    meta = None
    if parent is not None and rows:
        if not timed:
            del columns["achieved_ms"]
        meta = write_layer_over(
            directory,
            parent[0],
            parent[1],
            parent[1]["checksums"],
            BOARD,
            directory.name,
            pa.table(columns),
            1.0,
            8,
        )
        if meta is not None:
            if order == "unique":
                meta["rank"] = "unique"
            if timed:
                meta["tieBreak"] = "first_achieved"
            assert is_layered(meta)
    if meta is None:
        table = pa.table(
            {"board": pa.array([BOARD] * len(rows), pa.string()), **columns}
        )
        orders = {BOARD: (timed, order == "unique")}
        meta = write_segments(table, directory, 2, orders).get(BOARD)
    if meta is None:  # no rows: the board is empty in this generation
        return None, None
    return load_board(directory, BOARD, meta), meta


def rows_of(segment: BoardSegment | None) -> dict[str, tuple[int, int]]:
    if segment is None:
        return {}
    return {
        e["playerId"]: (e["rank"], e["score"])
        for e in segment.entries(0, segment.population)
    }


def oracle_diff(
    before: BoardSegment | None, after: BoardSegment | None, limit: int
) -> dict[str, Any]:
    """The per-row dict diff serving/history.py had before PairDiff (its answer
    must not change)."""
    was, now = rows_of(before), rows_of(after)
    moved = [
        (p, was[p], now[p]) for p in was.keys() & now.keys() if was[p][0] != now[p][0]
    ]
    moved.sort(key=lambda m: (-abs(m[1][0] - m[2][0]), m[0].encode("utf-8")))
    entered = sorted(
        now.keys() - was.keys(), key=lambda p: (now[p][0], p.encode("utf-8"))
    )
    left = sorted(was.keys() - now.keys(), key=lambda p: (was[p][0], p.encode("utf-8")))
    return {
        "movers": [
            {
                "playerId": p,
                "fromRank": a[0],
                "toRank": b[0],
                "fromScore": a[1],
                "toScore": b[1],
            }
            for p, a, b in moved[:limit]
        ],
        "entered": [
            {"playerId": p, "rank": now[p][0], "score": now[p][1]}
            for p in entered[:limit]
        ],
        "left": [
            {"playerId": p, "rank": was[p][0], "score": was[p][1]} for p in left[:limit]
        ],
        "counts": {"movers": len(moved), "entered": len(entered), "left": len(left)},
    }


@hsettings(max_examples=200, deadline=None)
@given(board_strategy, order_strategy, st.lists(ids_strategy, max_size=6))
def test_board_arrays_find_every_row_and_rank(
    scores: dict[str, int], order: str, probes: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        segment, _ = segment_of(Path(tmp) / "g", scores, order)
        if segment is None:
            return
        arrays = BoardArrays.build(segment)
        for row, entry in enumerate(segment.entries(0, segment.population)):
            assert arrays.row_of(entry["playerId"]) == row
            assert int(arrays.ranks[row]) == entry["rank"]
        for probe in [*probes, *(p + "a" for p in scores), *(p[:-1] for p in scores)]:
            assert arrays.row_of(probe) == segment.row_of(probe)


@hsettings(max_examples=200, deadline=None)
@given(board_strategy, board_strategy, order_strategy, st.integers(1, 4), st.booleans())
def test_pair_diff_equals_the_dict_diff(
    was: dict[str, int], now: dict[str, int], order: str, kept: int, layered: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        before, meta = segment_of(Path(tmp) / "g1", was, order)
        parent = (Path(tmp) / "g1", meta) if layered and meta else None
        after, _ = segment_of(Path(tmp) / "g2", now, order, parent)
        if after is not None:  # the layered board's own look-ups
            arrays = BoardArrays.build(after)
            for row, entry in enumerate(after.entries(0, after.population)):
                assert arrays.row_of(entry["playerId"]) == row
                assert int(arrays.ranks[row]) == entry["rank"]
        indexes = PairIndexes()
        # Few kept rows: the cut falls inside ties of rank and of rank change.
        found = PairDiff.build(before, after, indexes, rows=kept)
        for limit in range(1, kept + 1):
            assert found.page(limit) == oracle_diff(before, after, limit)
        whole = indexes.diff(before, after)
        for limit in (1, 5, 1000):
            assert whole.page(limit) == oracle_diff(before, after, limit)
        assert indexes.diff(before, after) is whole  # kept per pair


def test_kept_builds_once_per_key_and_other_keys_do_not_wait() -> None:
    kept = Kept(4)
    a, b = object(), object()
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        assert release.wait(10)
        return "A"

    results: list[str] = []
    first = threading.Thread(target=lambda: results.append(kept.get((a,), slow)))
    first.start()
    assert started.wait(10)
    # Another key is built and read while A's build runs.
    assert kept.get((b,), lambda: "B") == "B"
    second = threading.Thread(
        target=lambda: results.append(kept.get((a,), lambda: "built twice"))
    )
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert results == ["A", "A"]
    assert kept.builds == 2
