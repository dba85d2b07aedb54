"""History and diff (api/history.py, serving/history.py) against a brute-force
oracle: random events (ties, corrections, events of other boards, events not
applied) cut into generations written with the test writer, each with the
contributions index of the log records it landed (serving/contributions.py's
writer, layered over its parent's), and an award snapshot of the last generation.
Every count of every history entry and diff is checked against scores recomputed
from the events."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from api.history import HistoryService, WouldBlock
from conf.boards import load_boards
from serving.awards import rank_board, write_version
from serving.registry import GenerationRegistry
from speed.partitions import partition_of
from tests.support.segments import write_contributions, write_generation

pytestmark = pytest.mark.unit
BOARD = "season:S4:global"
OTHER = "alltime:all:global"
PARTITIONS = 2
PLAYERS = [f"P{i}" for i in range(6)]
CONFIG = load_boards()
SEASON = next(s for s in CONFIG.seasons if s.id == "S4")

# (player, match, points, kind, applied)
events_strategy = st.lists(
    st.tuples(
        st.sampled_from(PLAYERS),
        st.sampled_from(["M0", "M1", "M2"]),
        st.integers(0, 6),  # a small range: many ties
        st.sampled_from(["result", "correction"]),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
)


def above_of(scores: dict[str, int], player: str) -> set[str]:
    return {q for q, s in scores.items() if s > scores[player]}


def rank_in(scores: dict[str, int], player: str) -> int:
    return 1 + len(above_of(scores, player))


def build(
    root: Path, events: list[tuple[str, str, int, str, bool]], cuts: list[int]
) -> tuple[list[dict[str, int]], list[dict[str, int]], dict[str, list[Any]]]:
    """Write generations (one per cut) with their contributions indexes; return
    each generation's scores and boundary, and per player its applied events
    (position, body)."""
    contributions: dict[tuple[str, str], int] = {}
    positions = [0] * PARTITIONS
    records: list[dict[str, Any]] = []
    landed: list[list[dict[str, Any]]] = []
    applied: dict[str, list[Any]] = {}
    generations: list[dict[str, int]] = []
    boundaries: list[dict[str, int]] = []
    totals: dict[str, int] = {}
    for index, (player, match, points, kind, ok) in enumerate(events, start=1):
        partition = partition_of(player, PARTITIONS)
        positions[partition] += 1
        position = positions[partition]
        event = {
            "eventId": f"E{index}",
            "matchId": match,
            "kind": kind,
            "occurredAt": "2026-11-20T10:00:00.000Z",
            "playerId": player,
        }
        items = [{"board": OTHER, "total": 1000 + index, "version": 1}]
        status = "accepted" if ok else "quarantined"
        if ok:
            # A correction (or a result for a known match) replaces the match's
            # contribution: the total moves by the difference.
            before = contributions.get((player, match), 0)
            contributions[(player, match)] = points
            totals[player] = totals.get(player, 0) + points - before
            items.append({"board": BOARD, "total": totals[player], "version": 1})
            applied.setdefault(player, []).append(
                (partition, position, {**event, "delta": points - before})
            )
        record = {
            "partition": partition,
            "position": position,
            "status": status,
            "event": event,
            "result": {"status": status, "boards": items},
        }
        records.append(record)
        if index in cuts:
            landed.append(records)
            records = []
            generations.append(dict(totals))
            boundaries.append({str(p): positions[p] for p in range(PARTITIONS)})
    segments = root / "segments"
    segments.mkdir()
    for number, (scores, boundary) in enumerate(
        zip(generations, boundaries, strict=True), start=1
    ):
        boards = {BOARD: scores} if scores else {}
        write_generation(segments, number, boards, boundary)
        write_contributions(
            segments, number, landed[number - 1], number - 1 if number > 1 else None
        )
    return generations, boundaries, applied


def changes_between(
    applied: list[Any], player: str, lower: dict[str, int], upper: dict[str, int]
) -> list[dict[str, Any]]:
    p = str(partition_of(player, PARTITIONS))
    return [
        {k: v for k, v in body.items() if k != "playerId"}
        for _, position, body in applied
        if lower.get(p, 0) < position <= upper[p]
    ]


@hsettings(max_examples=25, deadline=None)
@given(events_strategy, st.data())
def test_history_and_diff_match_the_oracle(
    events: list[tuple[str, str, int, str, bool]], data: st.DataObject
) -> None:
    n = len(events)
    cuts = sorted(
        set(data.draw(st.lists(st.integers(1, n), min_size=1, max_size=4))) | {n}
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generations, boundaries, applied = build(root, events, cuts)
        with_award = data.draw(st.booleans()) and bool(generations[-1])
        if with_award:
            last = generations[-1]
            table = rank_board(
                pa.array(list(last), pa.string()),
                pa.array(list(last.values()), pa.int64()),
                SEASON,
            )
            write_version(
                root,
                SEASON,
                1,
                {BOARD: table},
                pa.table(
                    {
                        "player_id": pa.array([], pa.string()),
                        "match_id": pa.array([], pa.string()),
                        "board": pa.array([], pa.string()),
                        "points": pa.array([], pa.int64()),
                        "removed": pa.array([], pa.bool_()),
                        "position": pa.array([], pa.int64()),
                    }
                ),
                generation=f"g{len(generations)}",
                boundary=boundaries[-1],
                closed_at=datetime.now(UTC),
            )
        registry = GenerationRegistry(root / "segments", retained=10)
        service = HistoryService(lambda: CONFIG, registry, root, PARTITIONS)
        # The snapshots oldest first, as (scores, boundary, generation id, award).
        snapshots: list[tuple[dict[str, int], dict[str, int], str, int | None]] = [
            (scores, boundary, f"g{i}", None)
            for i, (scores, boundary) in enumerate(
                zip(generations, boundaries, strict=True), start=1
            )
        ]
        if with_award:
            snapshots.append((generations[-1], boundaries[-1], snapshots[-1][2], 1))
        # Nothing built yet: a read that must not block (the route's, on the event
        # loop) hands over to a thread.
        with pytest.raises(WouldBlock):
            service.history(BOARD, PLAYERS[0], 1, block=False)
        for player in PLAYERS:
            present = [s for s in snapshots if player in s[0]]
            if not present:
                with pytest.raises(Exception) as raised:
                    service.history(BOARD, player, 100)
                assert getattr(raised.value, "code", None) == "player_not_found"
                continue
            limit = data.draw(st.integers(1, len(present) + 1))
            # A read of every entry builds what the player's reads need (the
            # pairs, the index mapped); the checked read with another limit then
            # runs as on the event loop (block=False) and must not need a thread.
            service.history(BOARD, player, 100)
            body = orjson.loads(service.history(BOARD, player, limit, block=False).body)
            entries = body["entries"]
            want = list(reversed(present))[:limit]
            assert len(entries) == len(want)
            for k, (entry, snap) in enumerate(zip(entries, want, strict=True)):
                scores, boundary, gen, award = snap
                assert entry["generation"]["id"] == gen
                assert entry["generation"].get("award", {}).get("version") == award
                assert entry["score"] == scores[player]
                assert entry["rank"] == rank_in(scores, player)
                assert entry["population"] == len(scores)
                older = list(reversed(present))[k + 1 : k + 2]
                index = snapshots.index(snap)
                lower = (
                    older[0][1]
                    if older
                    else snapshots[index - 1][1]
                    if index > 0
                    else {}
                )
                assert entry["changes"] == changes_between(
                    applied.get(player, []), player, lower, boundary
                )
                if not older:
                    assert entry["rankChange"] is None
                    continue
                before = older[0][0]
                was, now = above_of(before, player), above_of(scores, player)
                change = entry["rankChange"]
                assert change == {
                    "from": rank_in(before, player),
                    "to": rank_in(scores, player),
                    "ownScoreChange": scores[player] - before[player],
                    "newlyAbove": len(now - was),
                    "noLongerAbove": len(was - now),
                }
                assert (
                    change["to"] - change["from"]
                    == change["newlyAbove"] - change["noLongerAbove"]
                )
        # Every pair of generations: the diff's lists and counts.
        for i, a in enumerate(generations, start=1):
            for j, b in enumerate(generations, start=1):
                limit = data.draw(st.integers(1, 8))
                got = orjson.loads(service.diff(BOARD, f"g{i}", f"g{j}", limit).body)
                ra = {p: rank_in(a, p) for p in a}
                rb = {p: rank_in(b, p) for p in b}
                moved = {p for p in a.keys() & b.keys() if ra[p] != rb[p]}
                assert got["counts"] == {
                    "movers": len(moved),
                    "entered": len(b.keys() - a.keys()),
                    "left": len(a.keys() - b.keys()),
                }
                assert len(got["movers"]) == min(limit, len(moved))
                sizes = [abs(m["fromRank"] - m["toRank"]) for m in got["movers"]]
                assert sizes == sorted(sizes, reverse=True)
                if moved and got["movers"]:
                    assert sizes[0] == max(abs(ra[p] - rb[p]) for p in moved)
                for m in got["movers"]:
                    p = m["playerId"]
                    assert p in moved
                    assert (m["fromRank"], m["toRank"]) == (ra[p], rb[p])
                    assert (m["fromScore"], m["toScore"]) == (a[p], b[p])
                assert {e["playerId"] for e in got["entered"]} <= b.keys() - a.keys()
                assert len(got["entered"]) == min(limit, len(b.keys() - a.keys()))
                assert {e["playerId"] for e in got["left"]} <= a.keys() - b.keys()
                assert len(got["left"]) == min(limit, len(a.keys() - b.keys()))


def test_a_kept_view_follows_a_new_award_version() -> None:
    """The view kept per board (api/history.py) is rebuilt when the season's award
    versions change: a version written after the first read is in the next."""
    events = [("P0", "M0", 3, "result", True), ("P1", "M1", 5, "result", True)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generations, boundaries, _ = build(root, events, [1, 2])
        registry = GenerationRegistry(root / "segments", retained=10)
        service = HistoryService(lambda: CONFIG, registry, root, PARTITIONS)
        before = orjson.loads(service.history(BOARD, "P0", 10).body)["entries"]
        assert [e["generation"]["id"] for e in before] == ["g2", "g1"]
        last = generations[-1]
        write_version(
            root,
            SEASON,
            1,
            {
                BOARD: rank_board(
                    pa.array(list(last), pa.string()),
                    pa.array(list(last.values()), pa.int64()),
                    SEASON,
                )
            },
            pa.table(
                {
                    "player_id": pa.array([], pa.string()),
                    "match_id": pa.array([], pa.string()),
                    "board": pa.array([], pa.string()),
                    "points": pa.array([], pa.int64()),
                    "removed": pa.array([], pa.bool_()),
                    "position": pa.array([], pa.int64()),
                }
            ),
            generation="g2",
            boundary=boundaries[-1],
            closed_at=datetime.now(UTC),
        )
        after = orjson.loads(service.history(BOARD, "P0", 10).body)["entries"]
        assert [e["generation"].get("award") for e in after] == [
            {"season": SEASON.id, "version": 1},
            None,
            None,
        ]
        assert [e["rank"] for e in after] == [2, 2, 1]
