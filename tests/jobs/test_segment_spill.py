"""A segment writer task over its spill threshold (jobs/segment_tasks.py
``board_tables``) writes one board at a time from files of its own, and writes
the same files, byte for byte, as a task that holds all its rows in memory.

The writer is the ``mapInArrow`` function itself, called here with Arrow batches
as Spark hands them (boards interleaved across batches): no Spark needed to check
what it writes."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.segment_tasks import (
    ITEMS_SCHEMA,
    KIND_BOARD,
    KIND_NAMED,
    KIND_ROW,
    board_tables,
    collected_entries,
    segment_writer,
)

pytestmark = pytest.mark.unit

# board -> its players, best first (ties in pairs; on "timed:S1" ordered by
# achieved_ms).
BOARDS = {
    "season:S1:global": [f"p{i}" for i in range(9)],
    "daily:2026-11-16:eu": ["p3", "p1", "p7"],
    "timed:S1": ["p2", "p5", "p4", "p6"],
}
ORDERS = {"timed:S1": (True, False)}


def task_rows() -> list[dict[str, object]]:
    """One task's rows: gold rows, versions the log named (one for a pair no row
    holds: it goes to the side file), and a marker of a board without rows."""
    rows: list[dict[str, object]] = []
    for board, players in BOARDS.items():
        for position, player in enumerate(players):
            rows.append(
                {
                    "board": board,
                    "position": position,
                    "player_id": player,
                    "score": 100 - 10 * (position // 2),
                    "achieved_ms": 1_000 + position if board in ORDERS else None,
                    "kind": KIND_ROW,
                    "version": None,
                }
            )
        rows.append(
            {"board": board, "player_id": players[0], "kind": KIND_NAMED, "version": 3}
        )
    rows.append(
        {"board": "timed:S1", "player_id": "gone", "kind": KIND_NAMED, "version": 2}
    )
    rows.append({"board": "daily:2026-11-17:eu", "kind": KIND_BOARD})
    random.Random(7).shuffle(rows)  # boards interleaved, as a hash partition's
    return rows


def batches(rows: list[dict[str, object]], size: int = 4) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pylist(rows[i : i + size], schema=ITEMS_SCHEMA)
        for i in range(0, len(rows), size)
    ]


def write(directory: Path, spill_rows: int) -> list[dict[str, object]]:
    directory.mkdir()
    writer = segment_writer(str(directory), 2, ORDERS, 0o027, spill_rows=spill_rows)
    return [row for out in writer(batches(task_rows())) for row in out.to_pylist()]


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_board_tables_spill_one_board_per_table_over_the_threshold(
    tmp_path: Path,
) -> None:
    rows = task_rows()
    whole = list(board_tables(batches(rows), len(rows), tmp_path))
    assert [t.num_rows for t in whole] == [len(rows)]
    spilled = list(board_tables(batches(rows), 5, tmp_path))
    boards = [t.column("board").unique().to_pylist() for t in spilled]
    assert boards == [[b] for b in sorted({str(r["board"]) for r in rows})]
    for table in spilled:
        board = table.column("board")[0].as_py()
        mine = [r for r in rows if r["board"] == board]
        assert sorted(table.to_pylist(), key=repr) == sorted(
            pa.Table.from_pylist(mine, schema=ITEMS_SCHEMA).to_pylist(), key=repr
        )
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


def test_a_spilling_task_writes_the_files_a_task_in_memory_writes(
    tmp_path: Path,
) -> None:
    held = write(tmp_path / "held", 10**9)
    spilled = write(tmp_path / "spilled", 3)
    entries, sides = collected_entries(held)
    assert set(entries) == set(BOARDS)
    assert set(sides) == {"timed:S1"}  # the named pair no row holds
    assert collected_entries(spilled) == (entries, sides)
    assert files(tmp_path / "spilled") == files(tmp_path / "held")
    assert not [p for p in (tmp_path / "spilled").iterdir() if p.is_dir()]
