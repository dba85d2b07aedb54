"""The versions merge the segment writer runs per task (jobs/versions.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from jobs.versions import KNOWN_SCHEMA, assign_versions, previous_versions
from serving.segments import write_board_segment, write_versions

pytestmark = pytest.mark.unit


def known(rows: list[tuple[str, str, int | None]]) -> pa.Table:
    return pa.table(
        {
            "board": [r[0] for r in rows],
            "player_id": [r[1] for r in rows],
            "version": pa.array([r[2] for r in rows], pa.int64()),
        },
        schema=KNOWN_SCHEMA,
    )


def test_rows_take_the_largest_version_and_the_rest_go_to_the_side() -> None:
    rows = pa.table({"board": ["B", "B", "C"], "player_id": ["z", "a", "a"]})
    versions, side = assign_versions(
        rows,
        known(
            [
                ("B", "a", 2),
                ("B", "a", 5),  # the delta's, above the previous segment's
                ("B", "z", 0),  # a previous segment's "never named"
                ("B", "gone", 4),  # named, no row: side
                ("B", "gone", 3),
                ("C", "held", 1),
                ("D", "x", 2),  # a board with no row at all
                ("C", "zero", 0),  # 0 is "never named": not in the side file
                ("C", "none", None),
            ]
        ),
    )
    assert versions.to_pylist() == [None, 5, None]  # row order kept
    assert side.to_pylist() == [
        {"board": "B", "player_id": "gone", "version": 4},
        {"board": "C", "player_id": "held", "version": 1},
        {"board": "D", "player_id": "x", "version": 2},
    ]


def test_no_rows_and_nothing_known() -> None:
    rows = pa.table(
        {"board": pa.array([], pa.string()), "player_id": pa.array([], pa.string())}
    )
    versions, side = assign_versions(rows, KNOWN_SCHEMA.empty_table())
    assert len(versions) == 0 and side.num_rows == 0


def test_previous_versions_read_the_segment_and_the_side_file(tmp_path: Path) -> None:
    write_board_segment(
        tmp_path,
        "B",
        pa.array(["p", "q"]),
        pa.array([9, 8], pa.int64()),
        2,
        versions=pa.array([3, 0], pa.int64()),
    )
    name, _ = write_versions(tmp_path, "B", pa.array(["h"]), pa.array([6], pa.int64()))
    table = previous_versions(tmp_path, "B", "B.arrow", name)
    assert sorted(table.to_pylist(), key=lambda r: r["player_id"]) == [
        {"board": "B", "player_id": "h", "version": 6},
        {"board": "B", "player_id": "p", "version": 3},
        {"board": "B", "player_id": "q", "version": 0},
    ]
    # A segment without a version column (all players hidden) adds nothing.
    write_board_segment(
        tmp_path, "E", pa.array([], pa.string()), pa.array([], pa.int64()), 1
    )
    assert previous_versions(tmp_path, "E", "E.arrow", None).num_rows == 0
