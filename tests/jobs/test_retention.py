"""Retention never removes a generation the speed layer stands on (issue 7, item 4)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from jobs.publish import run_publish
from jobs.retention import (
    RETENTION_GRACE_SECONDS,
    apply_retention,
    protected_generations,
)
from jobs.tables import GOLD_MANIFEST, PublishedRow, extract_published
from serving.manifest import rfc3339
from speed.rebase import rebase_published
from tests.conftest import SignedClient, event

BOARD = "season:S4:global"


def _rows(settings: Settings, published_at: list[float]) -> list[PublishedRow]:
    from datetime import UTC, datetime

    rows = []
    for number, moment in enumerate(published_at, start=1):
        generation = f"g{number}"
        (settings.segments_dir / generation).mkdir(parents=True)
        stamp = rfc3339(datetime.fromtimestamp(moment, UTC))
        rows.append(
            PublishedRow(generation, number, json.dumps({"publishedAt": stamp}))
        )
    return rows


@pytest.mark.unit
def test_retention_keeps_newest_k_protected_and_recently_superseded(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "lb", retained_generations=2)
    now = time.time()
    hour = 3600.0
    rows = _rows(
        settings, [now - 5 * hour, now - 4 * hour, now - 3 * hour, now - 60, now - 30]
    )
    # g1 is a partition's base; g2 left the newest 2 when g4 came (60 s ago): grace;
    # g3 left them when g5 came (30 s ago): grace too.
    deleted = apply_retention(settings, rows, {"g1"}, now=now)
    assert deleted == []
    later = now + RETENTION_GRACE_SECONDS + 1
    assert apply_retention(settings, rows, {"g1"}, now=later) == ["g2", "g3"]
    assert sorted(p.name for p in settings.segments_dir.iterdir()) == ["g1", "g4", "g5"]


@pytest.mark.integration
def test_publishes_without_rebase_keep_the_base_generation(
    spark: Any, settings: Settings
) -> None:
    settings = settings.model_copy(update={"retained_generations": 1})
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        for i, points in enumerate((30, 20, 10)):
            reply = api.post(
                "/v1/score-events",
                event(
                    eventId=f"E{i}",
                    playerId=f"P{i}",
                    matchId=f"M{i}",
                    result={"points": points},
                ),
            )
            assert reply.status_code == 200
        assert run_publish(settings, spark=spark) == "g1"
        assert set(rebase_published(settings, "g1").partitions.values()) == {"ok"}
        # Two publishes killed before their rebase: every partition stays on g1.
        api.post(
            "/v1/score-events",
            event(eventId="E9", playerId="P2", matchId="M9", result={"points": 50}),
        )
        assert run_publish(settings, spark=spark) == "g2"
        assert run_publish(settings, spark=spark) == "g3"
        assert protected_generations(settings) == {"g1"}
        # Item 10: what the jobs write is not world-readable.
        written = [
            path
            for root in (settings.delta_dir, settings.segments_dir)
            for path in root.rglob("*")
        ]
        assert any(p.suffix == ".parquet" for p in written)
        assert any(p.suffix == ".arrow" for p in written)
        for path in written:
            assert path.stat().st_mode & 0o007 == 0, path
        assert (settings.segments_dir / "g1" / "manifest.json").exists()
        # Live reads still stand on g1, exactly.
        client.app.state.generations.refresh(force=True)  # type: ignore[attr-defined]
        top = api.get(f"/v1/boards/{BOARD}/top").json()
        assert (top["exactness"], top["basis"]) == ("exact", "live"), top
        assert top["generation"]["id"] == "g1"
        assert [(e["playerId"], e["score"]) for e in top["entries"]] == [
            ("P2", 60),
            ("P0", 30),
            ("P1", 20),
        ]
        rank = api.get(f"/v1/boards/{BOARD}/players/P1").json()
        assert (rank["exactness"], rank["rank"]) == ("exact", 3)
        # Once rebased past it, g1 is an ordinary old generation again.
        rebase_published(settings, "g3")
        assert protected_generations(settings) == {"g3"}
        published = extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
        later = time.time() + RETENTION_GRACE_SECONDS + 1
        deleted = apply_retention(
            settings, published, protected_generations(settings), now=later
        )
        assert deleted == ["g1", "g2"]
        top = api.get(f"/v1/boards/{BOARD}/top").json()
        assert (top["exactness"], top["basis"]) == ("exact", "live")
        assert top["generation"]["id"] == "g3"


@pytest.mark.unit
def test_retention_of_a_chain_keeps_what_retained_generations_read(
    tmp_path: Path,
) -> None:
    """A layered generation hard-links its base and earlier layers into its own
    directory (serving/layers.py), and a compaction writes a base that links
    nothing: retention deleting the base's own generation, and then the chain's,
    leaves every retained generation reading the same board (issue 24 item 2)."""
    import pyarrow as pa

    from jobs.incremental import Previous, compact_linked_board
    from serving.layers import load_board, write_layer_over
    from serving.segments import board_entry, write_board_segment, write_hidden

    settings = Settings(data_dir=tmp_path / "lb", retained_generations=1)
    hour = 3600.0
    now = time.time()
    rows = _rows(
        settings, [now - 5 * hour, now - 4 * hour, now - 3 * hour, now - 2 * hour]
    )
    dirs = [settings.segments_dir / r.generation for r in rows]

    def table(board: dict[str, int]) -> pa.Table:
        ordered = sorted(board.items(), key=lambda kv: (-kv[1], kv[0].encode()))
        return pa.table(
            {
                "player_id": pa.array([p for p, _ in ordered], pa.string()),
                "score": pa.array([s for _, s in ordered], pa.int64()),
                "version": pa.array([1] * len(ordered), pa.int64()),
            }
        )

    def answers(directory: Path, meta: dict[str, Any]) -> list[tuple[str, int, int]]:
        segment = load_board(directory, BOARD, meta)
        return [
            (e["playerId"], e["score"], e["rank"])
            for e in segment.entries(0, segment.population)
        ]

    board = {f"p{i}": i % 4 for i in range(20)}
    first = table(board)
    sums = write_board_segment(
        dirs[0],
        BOARD,
        first.column("player_id").combine_chunks(),
        first.column("score").combine_chunks(),
        2,
        versions=first.column("version").combine_chunks(),
    )
    meta: dict[str, Any] = board_entry(BOARD, first.num_rows, sums)
    checksums = dict(sums)
    for step, directory in enumerate(dirs[1:3], start=1):
        board[f"p{step}"] = 10 + step  # one changed player
        board.pop(f"p{10 + step}")  # one removed player
        board[f"new{step}"] = 2  # one new player
        entry = write_layer_over(
            directory,
            dirs[step - 1],
            meta,
            checksums,
            BOARD,
            f"g{step + 1}",
            table(board),
            0.5,
            8,
        )
        assert entry is not None  # a layer, not a compaction
        meta, checksums = entry, entry.pop("checksums")
    assert meta["base"] == "g1" and len(meta["layers"]) == 2
    expected = answers(dirs[2], meta)
    assert [(p, s) for p, s, _ in expected] == [
        (r["player_id"], r["score"]) for r in table(board).to_pylist()
    ]
    # A shadowed player's side file travels with the board, not with the chain.
    metas = {BOARD: {**meta, "checksums": dict(checksums)}}
    write_hidden([(BOARD, "ghost", 7)], dirs[2], metas)
    meta = metas[BOARD]
    checksums = meta.pop("checksums")
    previous = Previous("g3", {}, {"boards": {BOARD: meta}}, dirs[2])
    compact = compact_linked_board(previous, BOARD, dirs[3], checksums, 2)
    sums = compact.pop("checksums")
    assert "layers" not in compact and "base" not in compact
    assert answers(dirs[3], compact) == expected
    assert sorted(sums) == sorted(
        [compact[k] for k in ("file", "index", "buckets", "hidden")]
    )
    assert dict(load_board(dirs[3], BOARD, compact).hidden) == {"ghost": 7}
    # The base is g4's own (a fresh file), the hidden side file a link.
    assert (dirs[3] / compact["file"]).stat().st_nlink == 1

    # g3 alone is retained (and protected, as a partition's base): the base's own
    # generation g1 and g2 go, g3's chain still reads the same board.
    assert apply_retention(settings, rows[:3], {"g3"}, now=now) == ["g1", "g2"]
    assert answers(dirs[2], meta) == expected
    # After the compaction g3 goes too; g4 links nothing of it.
    assert apply_retention(settings, rows, set(), now=now) == ["g3"]
    assert answers(dirs[3], compact) == expected
