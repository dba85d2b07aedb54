"""A layered board (base + chain of layers, serving/layers.py) answers every read
exactly as one full segment of the merged rows does (pure Python, no Spark)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.files import read_arrow
from serving.layers import (
    Layer,
    LayeredSegment,
    Parent,
    apply_changes,
    compacted,
    load_board,
    write_board_layer,
)
from serving.segments import BoardSegment, board_entry, write_board_segment

pytestmark = pytest.mark.unit

BOARD = "all-time:global"
# A few ids, some non-ASCII (UTF-8 byte order differs from code-point order).
PLAYERS = [f"p{i}" for i in range(12)] + ["é1", "z", "Ω", "aa", "a"]

Row = tuple[str, int, int, int]  # player, oriented score, achieved_ms, version


def key(row: Row, timed: bool) -> tuple[int, int, bytes]:
    return (-row[1], row[2] if timed else 0, row[0].encode("utf-8"))


def write_parent(
    directory: Path, rows: dict[str, Row], timed: bool, unique: bool, target: int = 2
) -> Parent:
    """``rows`` as a full segment and its manifest entry (as the parent of a next
    generation's board)."""
    ordered = sorted(rows.values(), key=lambda r: key(r, timed))
    sums = write_board_segment(
        directory,
        BOARD,
        pa.array([r[0] for r in ordered], pa.string()),
        pa.array([r[1] for r in ordered], pa.int64()),
        target,
        pa.array([r[2] for r in ordered], pa.int64()) if timed else None,
        pa.array([r[3] for r in ordered], pa.int64()),
    )
    meta = board_entry(BOARD, len(ordered), sums)
    if timed:
        meta["tieBreak"] = "first_achieved"
    if unique:
        meta["rank"] = "unique"
    return Parent(directory, meta, meta["checksums"])


def write_full(
    directory: Path, rows: dict[str, Row], timed: bool, unique: bool, target: int
) -> BoardSegment:
    parent = write_parent(directory, rows, timed, unique, target)
    return BoardSegment.load(directory, BOARD, dict(parent.meta))


score = st.integers(-3, 6)  # few values: many ties
row_change = st.tuples(st.sampled_from(PLAYERS), score, st.integers(0, 3))
history = st.fixed_dictionaries(
    {
        "base": st.lists(row_change, max_size=14),
        # Per layer: changed/new rows and removed players.
        "layers": st.lists(
            st.tuples(
                st.lists(row_change, max_size=6),
                st.lists(st.sampled_from(PLAYERS), max_size=3),
            ),
            min_size=1,
            max_size=4,
        ),
        "timed": st.booleans(),
        "unique": st.booleans(),
        "target": st.integers(1, 4),
        "list_changed": st.booleans(),
    }
)


def check_same(layered: BoardSegment, full: BoardSegment, timed: bool) -> None:
    n = full.population
    assert layered.population == n
    assert layered.entries(0, n) == full.entries(0, n)
    assert layered.entries(-2, n + 3) == full.entries(-2, n + 3)
    all_scores = full.scores.tolist()

    def oracle_rank(entry: dict) -> int:  # type: ignore[type-arg]
        if full.unique_rank:
            return int(entry["position"])
        return 1 + sum(s > entry["score"] for s in all_scores)

    for start in range(n):
        assert layered.entry(start) == full.entry(start)
        window = layered.entries(start, start + 3)
        assert window == full.entries(start, start + 3)
        # Ranks of a window that starts mid-board, against a count of the scores
        # (entries bisect only for their first row).
        assert [e["rank"] for e in window] == [oracle_rank(e) for e in window]
        assert int(layered.scores[start]) == int(full.scores[start])
        assert layered.players.str_at(start) == full.players.str_at(start)
        assert layered.version_at(start) == full.version_at(start)
        if timed:
            assert int(layered.achieved[start]) == int(full.achieved[start])
    if n:
        assert int(layered.scores[-1]) == int(full.scores[-1])
        assert list(layered.scores[1:4]) == list(full.scores[1:4])
    for player in [*PLAYERS, "nobody"]:
        assert layered.row_of(player) == full.row_of(player), player
    for value in range(-5, 9):
        assert layered.count_above(value) == full.count_above(value), value
        assert layered.count_with(value) == full.count_with(value), value
        assert layered.distinct_above(value) == full.distinct_above(value), value
        assert layered.rank_of_score(value) == full.rank_of_score(value)
        for player in ("a", "p3", "p5", "é1", "zz"):
            for achieved in (None, 0, 2) if timed else (None,):
                assert layered.first_row_after(
                    value, player, achieved
                ) == full.first_row_after(value, player, achieved)
                assert layered.first_row_at_or_after(
                    value, player, achieved
                ) == full.first_row_at_or_after(value, player, achieved)
    # Many players' rows at once (apply_changes' vectorized search) are row_of's,
    # for every player on the board and absent ones, in any order.
    probe = [full.players.str_at(r) for r in range(n)] + ["a", "p3", "é1", "zz", ""]
    for segment in (layered, full):
        want = [-1 if (row := segment.row_of(p)) is None else row for p in probe]
        assert segment.rows_of(probe).tolist() == want
        assert segment.rows_of([]).tolist() == []
        assert segment.rows_of(probe[:1] * 2).tolist() == want[:1] * 2
    # Both ways the full board answers (the choice depends on how many are asked).
    assert full._searched_rows(probe).tolist() == full._hashed_rows(probe).tolist()
    assert full._hashed_rows(probe[:2] * 2).tolist() == want[:2] * 2
    # Whole columns (the speed layer's partition rows) materialize the same bytes.
    assert np.asarray(layered.scores).tolist() == full.scores.tolist()
    assert np.asarray(layered.versions).tolist() == full.versions.tolist()
    assert layered.players.offsets.tolist() == full.players.offsets.tolist()
    assert bytes(layered.players.data) == bytes(full.players.data)
    assert layered.index.tolist() == full.index.tolist()
    # Buckets: updated from the layers (not re-cut), but exact counts that cover
    # the board, the first lower being its minimum.
    lowers, counts = layered.bucket_lowers, layered.bucket_counts
    scores = full.scores.tolist()
    assert int(np.sum(counts)) == n
    if n:
        assert int(lowers[0]) == min(scores)
        assert list(lowers) == sorted(set(lowers.tolist()))
        uppers = [*lowers.tolist()[1:], max(scores) + 1]
        for lo, hi, count in zip(lowers.tolist(), uppers, counts.tolist(), strict=True):
            assert count == sum(1 for s in scores if lo <= s < hi)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(history)
def test_layered_reads_equal_the_merged_segment(case: dict) -> None:  # type: ignore[type-arg]
    timed, unique, target = case["timed"], case["unique"], case["target"]
    version = 0
    rows: dict[str, Row] = {}
    for player, points, achieved in case["base"]:
        version += 1
        rows[player] = (player, points, achieved, version)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "base").mkdir()
        base = write_full(root / "base", rows, timed, unique, target)
        layers = []
        for number, (changes, removals) in enumerate(case["layers"], start=2):
            directory = root / f"g{number}"
            directory.mkdir()
            new: dict[str, Row] = {}
            for player, points, achieved in changes:
                version += 1
                new[player] = (player, points, achieved, version)
            gone = {p for p in removals if p not in new}
            for p in gone:
                rows.pop(p, None)
            rows.update(new)
            # The replaced list may name the changed players or leave them implied.
            replaced = gone | (set(new) if case["list_changed"] else set())
            entry = write_board_layer(
                directory,
                BOARD,
                f"g{number}",
                [(r[0], r[1], r[2] if timed else None, r[3]) for r in new.values()],
                replaced,
            )
            layers.append(Layer.load(directory, entry))
            layered = LayeredSegment(base, layers)
            (directory / "full").mkdir()
            full = write_full(directory / "full", rows, timed, unique, target)
            check_same(layered, full, timed)
        # Compaction: the merged columns written as a new base give the same board.
        players, scores, achieved, versions = compacted(layered)
        (root / "compact").mkdir()
        sums = write_board_segment(
            root / "compact", BOARD, players, scores, target, achieved, versions
        )
        meta = board_entry(BOARD, len(players), sums)
        if unique:
            meta["rank"] = "unique"
        check_same(load_board(root / "compact", BOARD, meta), full, timed)


def test_load_board_reads_a_chain_from_the_manifest_entry(tmp_path: Path) -> None:
    """A manifest entry naming layers loads as a LayeredSegment from one directory
    (the base and earlier layers hard-linked into it)."""
    rows = {p: (p, s, 0, 1) for p, s in (("a", 5), ("b", 3), ("c", 3), ("d", 1))}
    base = write_full(tmp_path, rows, False, False, 2)
    meta = board_entry(
        BOARD,
        base.population,
        {
            f"{BOARD}.arrow": "x",
            f"{BOARD}.index.arrow": "x",
            f"{BOARD}.buckets.arrow": "x",
        },
    )
    first = write_board_layer(tmp_path, BOARD, "g2", [("b", 9, None, 2)], ["d"])
    second = write_board_layer(tmp_path, BOARD, "g3", [("e", 3, None, 3)], [])
    meta |= {"base": "g1", "layers": [first, second]}
    segment = load_board(tmp_path, BOARD, meta)
    assert isinstance(segment, LayeredSegment)
    assert [(e["playerId"], e["rank"]) for e in segment.entries(0, 10)] == [
        ("b", 1),
        ("a", 2),
        ("c", 3),
        ("e", 3),
    ]
    assert segment.row_of("d") is None
    assert segment.layer_rows == 2


changes_history = st.fixed_dictionaries(
    {
        "base": st.lists(row_change, max_size=10),
        # Per generation: (player, new row or None: no public row any more), the
        # players the delta's log named (a newer version), and the limits.
        "generations": st.lists(
            st.tuples(
                st.lists(
                    st.tuples(
                        st.sampled_from(PLAYERS),
                        st.none() | st.tuples(score, st.integers(0, 3)),
                    ),
                    max_size=6,
                ),
                st.lists(st.sampled_from(PLAYERS), max_size=3),
                st.none()
                | st.tuples(st.sampled_from([0.2, 1.0, 50.0]), st.integers(1, 3)),
            ),
            min_size=1,
            max_size=5,
        ),
        "timed": st.booleans(),
        "unique": st.booleans(),
    }
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(changes_history)
def test_applied_changes_equal_the_full_board(case: dict) -> None:  # type: ignore[type-arg]
    """A board built generation after generation from its changes only
    (``apply_changes``: a layer, or a compaction from the parent merged with the
    changes) reads as the full segment of the expected rows, and its versions side
    file holds exactly the named pairs without a public row."""
    timed, unique = case["timed"], case["unique"]
    version = 0
    rows: dict[str, Row] = {}
    for player, points, achieved in case["base"]:
        version += 1
        rows[player] = (player, points, achieved if timed else 0, version)
    side: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "g1").mkdir()
        parent = write_parent(root / "g1", rows, timed, unique) if rows else None
        for number, (changes, named_players, layering) in enumerate(
            case["generations"], start=2
        ):
            generation = f"g{number}"
            directory = root / generation
            directory.mkdir()
            changed = {
                p: None if row is None else (row[0], row[1] if timed else 0)
                for p, row in changes
            }
            named = {}
            for player in named_players:
                version += 1
                named[player] = version
            parent_side = dict(side)
            # The oracle: each changed or named player's new row and version.
            for player in sorted({*changed, *named}):
                before = rows[player][3] if player in rows else side.get(player, 0)
                now = max(named.get(player, 0), before)
                public = changed[player] if player in changed else None
                if player not in changed and player in rows:
                    public = (rows[player][1], rows[player][2])
                side.pop(player, None)
                rows.pop(player, None)
                if public is None:
                    if now > 0:
                        side[player] = now
                else:
                    rows[player] = (player, public[0], public[1], now)
            entry, new_side = apply_changes(
                directory,
                BOARD,
                generation,
                parent,
                {
                    p: None if row is None else (row[0], row[1] if timed else None)
                    for p, row in changed.items()
                },
                named,
                parent_side,
                2,
                (timed, unique),
                layering,
            )
            assert new_side == side
            if not rows:
                assert entry is None
                parent = None
                continue
            assert entry is not None
            if layering is None:
                assert not entry.get("layers")
            (directory / "full").mkdir()
            full = write_full(directory / "full", rows, timed, unique, 2)
            served = load_board(directory, BOARD, entry)
            assert isinstance(served, LayeredSegment) == bool(entry.get("layers"))
            check_same(served, full, timed)
            parent = Parent(directory, entry, entry["checksums"])


def test_a_layer_is_in_display_order_by_utf8_bytes(tmp_path: Path) -> None:
    """Arrow sorts the layer (not a Python key per row): ties of score (and of
    achieved_ms on a timed board) by the player id's UTF-8 bytes, which put U+FFFF
    before an astral character (UTF-16 code units would not) and 'Z' before 'a'."""
    ids = ["\uffff", "\U0001f600", "\u00ff", "a", "Z", "é1"]
    rows = [(p, 5, None, 1) for p in ids] + [("top", 9, None, 1), ("low", -2, None, 1)]
    entry = write_board_layer(tmp_path, BOARD, "g2", rows, ["x", "\uffff", "Z"])
    table = read_arrow(tmp_path / entry["file"]).to_pydict()
    tied = sorted(ids, key=lambda p: p.encode("utf-8"))
    assert table["player_id"] == ["top", *tied, "low"]
    assert table["score"] == [9, *[5] * len(ids), -2]
    gone = read_arrow(tmp_path / entry["replaced"]).column("player_id").to_pylist()
    assert gone == ["Z", "x", "\uffff"]
    timed = [("b", 5, 7, 1), ("a", 5, 9, 1), ("c", 5, 7, 1), ("d", 6, 99, 1)]
    entry = write_board_layer(tmp_path, BOARD, "g3", timed, [])
    table = read_arrow(tmp_path / entry["file"]).to_pydict()
    assert table["player_id"] == ["d", "b", "c", "a"]
    assert table["achieved_ms"] == [99, 7, 7, 9]
