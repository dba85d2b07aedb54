"""The contributions index (serving/contributions.py) against the bronze-derived
contributions the history read listed before it existed: random logs with
corrections, redeliveries (``duplicate``), events not applied (quarantined, then
released), items of several boards, several partitions, cut into many generations
whose layers are written over their parents' (tails merged, a cap on the chain,
compaction). For every generation, board, player and boundary the index answers
exactly what the scan of the log records up to that boundary answers."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from serving import contributions as index_module
from serving.contributions import load, record_contributions, write_index
from serving.log_records import board_items

pytestmark = pytest.mark.unit
BOARDS = ["season:S4:global", "alltime:all:global"]
PLAYERS = ["P0", "P1", "P2", "Ω3"]
PARTITIONS = 2
APPLIED = frozenset({"accepted", "released"})


def bronze_events(
    rows: list[dict[str, Any]], board: str, player: str, partition: int, through: int
) -> list[tuple[int, dict[str, Any]]]:
    """What api/history.py derived from bronze before the index (its
    ``_player_events``, on the rows a filtered scan returned): the player's
    records of the partition up to ``through`` in position order, each applied
    item of the board with its delta from the previous one's total."""
    picked = sorted(
        (r["position"], r["raw"])
        for r in rows
        if r["partition"] == partition
        and r["player_id"] == player
        and r["position"] <= through
    )
    out = []
    total = 0
    for position, raw in picked:
        record = orjson.loads(raw)
        result = record.get("result") or {}
        status = result.get("status") or record.get("status")
        for item in board_items(result):
            if item.get("board") != board or "total" not in item:
                continue
            if (item.get("status") or status) not in APPLIED:
                continue
            event = record.get("event") or {}
            new_total = int(item["total"])
            out.append(
                (
                    int(position),
                    {
                        "eventId": event.get("eventId"),
                        "matchId": event.get("matchId"),
                        "kind": event.get("kind") or "result",
                        "occurredAt": event.get("occurredAt"),
                        "delta": new_total - total,
                    },
                )
            )
            total = new_total
    return out


# (player, match, points, kind, what happens to it)
event_strategy = st.tuples(
    st.sampled_from(PLAYERS),
    st.sampled_from(["M0", "M1", "M2"]),
    st.integers(-3, 9),
    st.sampled_from(["result", "correction", None]),
    st.sampled_from(
        ["accepted", "accepted", "duplicate", "quarantined", "released", "mixed"]
    ),
)


def log_of(
    events: list[tuple[str, str, int, str | None, str]],
) -> list[dict[str, Any]]:
    """Bronze rows (partition, position, player_id, raw) of the events, the
    totals moved as the speed layer moves them: a match's points replace the
    match's earlier points; a duplicate repeats an earlier event and applies
    nothing; ``mixed``: one board applied, the other held."""
    positions = [0] * PARTITIONS
    points: dict[tuple[str, str, str], int] = {}
    rows = []
    for n, (player, match, value, kind, fate) in enumerate(events):
        partition = sum(player.encode()) % PARTITIONS
        positions[partition] += 1
        event = {
            "eventId": f"E{n}" if fate != "duplicate" else f"E{max(0, n - 1)}",
            "playerId": player,
            "matchId": match,
            "occurredAt": None if n % 5 == 0 else f"2026-11-20T10:00:{n % 60:02d}Z",
        }
        if kind is not None:
            event["kind"] = kind
        items = []
        for k, board in enumerate(BOARDS):
            status = "held" if fate == "mixed" and k == 1 else None
            applies = fate in APPLIED or (fate == "mixed" and k == 0)
            if applies:
                points[(board, player, match)] = value + k
            total = sum(
                v for (b, p, _), v in points.items() if (b, p) == (board, player)
            )
            item: dict[str, Any] = {"board": board, "version": n}
            if fate != "duplicate":
                item["total"] = total
            if status:
                item["status"] = status
            items.append(item)
        record_status = "accepted" if fate == "mixed" else fate
        record = {
            "partition": partition,
            "position": positions[partition],
            "status": record_status,
            "event": event,
            "result": {"status": record_status, "boards": items},
        }
        rows.append(
            {
                "partition": partition,
                "position": positions[partition],
                "player_id": player,
                "raw": orjson.dumps(record).decode(),
            }
        )
    return rows


@hsettings(max_examples=40, deadline=None)
@given(
    st.lists(event_strategy, min_size=1, max_size=60),
    st.data(),
)
def test_the_index_answers_what_bronze_answered(
    events: list[tuple[str, str, int, str | None, str]], data: st.DataObject
) -> None:
    rows = log_of(events)
    n = len(rows)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n), max_size=10))) | {n})
    # A short cap so long histories also merge past it; compaction at random.
    cap = data.draw(st.integers(1, 4))
    # Keys that collide (pairs of boards and players sharing a key, players of
    # both partitions in one key's run): the lookups that cannot take a run's
    # last row.
    colliding = data.draw(st.booleans())
    weak = mock.patch.object(index_module, "_hash", lambda field, name: len(name) % 3)
    with (
        weak if colliding else contextlib.nullcontext(),
        tempfile.TemporaryDirectory() as tmp,
    ):
        root = Path(tmp)
        boundaries: list[dict[int, int]] = []
        manifests: list[dict[str, Any]] = []
        previous: tuple[Path, dict[str, Any]] | None = None
        start = 0
        original = index_module.MAX_CHAIN
        index_module.MAX_CHAIN = cap
        try:
            for number, cut in enumerate(cuts, start=1):
                directory = root / f"g{number}"
                directory.mkdir()
                landed = rows[start:cut]
                start = cut
                items = [
                    item
                    for r in landed
                    for item in record_contributions(
                        orjson.loads(r["raw"]),
                        r["player_id"],
                        r["partition"],
                        r["position"],
                    )
                ]
                compact = data.draw(st.integers(0, 9)) == 0
                entry = write_index(directory, f"g{number}", items, previous, compact)
                assert len(entry["layers"]) <= (1 if compact else cap)
                assert entry["rows"] == sum(layer["rows"] for layer in entry["layers"])
                boundary = dict.fromkeys(range(PARTITIONS), 0)
                for r in rows[:cut]:
                    boundary[r["partition"]] = r["position"]
                boundaries.append(boundary)
                manifest = {"boundary": boundary, "contributions": entry}
                manifests.append(manifest)
                previous = (directory, manifest)
        finally:
            index_module.MAX_CHAIN = original
        # Every generation's index (self-contained: its directory holds its
        # chain's files), for every boundary up to its own.
        for number, manifest in enumerate(manifests, start=1):
            directory = root / f"g{number}"
            assert sorted(p.name for p in directory.iterdir()) == sorted(
                layer["file"] for layer in manifest["contributions"]["layers"]
            )
            index = load(directory, manifest)
            assert index is not None
            for board in [*BOARDS, "daily:x:global"]:
                for player in [*PLAYERS, "P9"]:
                    partition = sum(player.encode()) % PARTITIONS
                    for b in [{partition: 0}, *boundaries[:number]]:
                        through = b[partition]
                        assert index.contributions(
                            board, player, partition, through
                        ) == bronze_events(rows, board, player, partition, through)
                    # Another partition: only entries logged there (none here).
                    other = (partition + 1) % PARTITIONS
                    assert index.contributions(board, player, other, 10**9) == (
                        bronze_events(rows, board, player, other, 10**9)
                    )
