"""The serving format round-trips: what the writer puts down, the reader maps back."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from serving.files import TMP_PREFIX, atomic_write_text, read_arrow, sha256_file
from serving.manifest import (
    MANIFEST_FILE,
    build_manifest,
    generation_id,
    generation_number,
    read_manifest,
)
from serving.registry import (
    GenerationExpiredError,
    GenerationNotFoundError,
    GenerationRegistry,
)
from serving.segments import (
    read_versions,
    write_hidden,
    write_segments,
    write_versions,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def gold(rows: list[tuple[str, str, int, int]]) -> pa.Table:
    """(board, player, score, achieved_ms) rows -> the gold table publish hands over:
    sorted by board, then display order."""
    rows = sorted(rows, key=lambda r: (r[0], -r[2], r[3], r[1].encode()))
    return pa.table(
        {
            "board": pa.array([r[0] for r in rows], pa.string()),
            "player_id": pa.array([r[1] for r in rows], pa.string()),
            "score": pa.array([r[2] for r in rows], pa.int64()),
            "achieved_ms": pa.array([r[3] for r in rows], pa.int64()),
        }
    )


ROWS = [
    ("all-time:global", "p3", 50, 0),
    ("all-time:global", "p1", 50, 0),
    ("all-time:global", "p2", 70, 0),
    ("all-time:global", "é9", 10, 0),
    ("season:S1:global", "a", 5, 300),
    ("season:S1:global", "b", 5, 100),
    ("season:S1:global", "c", 9, 200),
]


def publish(root: Path, number: int, rows: list[tuple[str, str, int, int]]) -> Path:
    directory = root / generation_id(number)
    directory.mkdir(parents=True)
    orders = {"season:S1:global": (True, True)}
    boards = write_segments(gold(rows), directory, bucket_target=2, orders=orders)
    write_hidden(
        [("all-time:global", "ghost", 60), ("daily:2026-01-01:global", "g2", 3)],
        directory,
        boards,
    )
    text = build_manifest(
        generation_id(number),
        datetime(2026, 1, 2, 3, 4, 5, 678000, UTC),
        {0: 7, 1: 3},
        boards,
        quarantine={"all-time:global": {"*": 900}},
    )
    atomic_write_text(directory / MANIFEST_FILE, text)
    return directory


def test_segments_round_trip(tmp_path: Path) -> None:
    directory = publish(tmp_path, 1, ROWS)
    registry = GenerationRegistry(tmp_path, retained=2)
    generation = registry.get(None)
    assert generation.id == "g1" and generation.boundary == {"0": 7, "1": 3}
    assert generation.header["publishedAt"] == "2026-01-02T03:04:05.678Z"

    board = generation.board("all-time:global")
    assert board is not None and board.population == 4
    assert board.entries(0, 10) == [
        {"position": 1, "rank": 1, "playerId": "p2", "score": 70},
        {"position": 2, "rank": 2, "playerId": "p1", "score": 50},
        {"position": 3, "rank": 2, "playerId": "p3", "score": 50},
        {"position": 4, "rank": 4, "playerId": "é9", "score": 10},
    ]
    assert board.row_of("p3") == 2 and board.row_of("é9") == 3
    assert board.row_of("ghost") is None
    assert board.hidden == {"ghost": 60}
    assert board.rank_of_score(60) == 2
    # Equi-depth buckets over 10, 50, 50, 70 with target 2.
    assert board.bucket_lowers.tolist() == [10, 70]
    assert board.bucket_counts.tolist() == [3, 1]

    timed = generation.board("season:S1:global")
    assert timed is not None and timed.unique_rank
    assert timed.achieved is not None
    assert [e["playerId"] for e in timed.entries(0, 3)] == ["c", "b", "a"]
    assert [e["rank"] for e in timed.entries(0, 3)] == [1, 2, 3]

    # A board whose players are all hidden: empty public side, hidden file kept.
    empty = generation.board("daily:2026-01-01:global")
    assert empty is not None and empty.population == 0
    assert empty.hidden == {"g2": 3}

    manifest = read_manifest(directory)
    assert manifest is not None
    meta = manifest["boards"]["all-time:global"]
    assert meta["hidden"] == "all-time:global.hidden.arrow"
    assert meta["sha256"] == sha256_file(directory / meta["file"])
    assert "checksums" not in meta
    assert manifest["quarantine"] == {"all-time:global": {"*": 900}}
    # Player-id order p1, p2, p3, é9 -> display rows 1, 0, 2, 3.
    index = read_arrow(directory / meta["index"]).column("row").to_pylist()
    assert index == [1, 0, 2, 3]


def test_files_are_byte_reproducible(tmp_path: Path) -> None:
    first = publish(tmp_path / "a", 1, ROWS)
    second = publish(tmp_path / "b", 1, list(reversed(ROWS)))
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_generation_ids_and_registry_lifecycle(tmp_path: Path) -> None:
    assert generation_number("g12") == 12
    for bad in ("g0", "g012", "12", "g", "g1x", "G1"):
        assert generation_number(bad) is None, bad
    with pytest.raises(ValueError):
        generation_id(0)

    registry = GenerationRegistry(tmp_path, retained=2)
    with pytest.raises(GenerationNotFoundError):
        registry.get(None)
    for number in (1, 2, 3):
        publish(tmp_path, number, ROWS)
    # Without its manifest a directory is not a generation (crashed publish).
    (tmp_path / "g4").mkdir()
    (tmp_path / f"{TMP_PREFIX}g5").mkdir()
    registry.refresh(force=True)
    assert registry.get(None).id == "g3"
    assert registry.get("g2").id == "g2"
    with pytest.raises(GenerationExpiredError) as expired:
        registry.get("g1")
    assert expired.value.latest == "g3"
    with pytest.raises(GenerationNotFoundError):
        registry.get("g4")
    # A base older than the newest K is still mapped on demand.
    older = registry.by_number(1)
    assert older is not None and older.board("all-time:global") is not None


def test_serving_imports_neither_spark_nor_the_layers_above() -> None:
    code = (
        "import sys, serving.files, serving.manifest, serving.segments, "
        "serving.registry\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'api', 'jobs', 'speed')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def imported_modules(package: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
    return found


def test_speed_does_not_import_api() -> None:
    offending = {m for m in imported_modules("speed") if m.split(".")[0] == "api"}
    assert not offending


def test_versions_side_file_round_trips(tmp_path: Path) -> None:
    """``<board>.versions.arrow``: sorted by player id (UTF-8 bytes) whatever order
    it is given, the same pairs give the same bytes, the reader gives them back,
    and the manifest lists it (an empty map too: a generation that keeps them)."""
    pairs = [("p2", 3), ("é9", 1), ("p10", 7)]
    name, digest = write_versions(
        tmp_path,
        "all-time:global",
        pa.array([p for p, _ in pairs]),
        pa.array([v for _, v in pairs], pa.int64()),
    )
    assert name == "all-time:global.versions.arrow"
    assert digest == sha256_file(tmp_path / name)
    table = read_versions(tmp_path / name)
    assert table.schema.names == ["player_id", "version"]
    assert table.to_pydict() == {"player_id": ["p10", "p2", "é9"], "version": [7, 3, 1]}
    other = tmp_path / "other"
    other.mkdir()
    reversed_pairs = list(reversed(pairs))
    _, again = write_versions(
        other,
        "all-time:global",
        pa.array([p for p, _ in reversed_pairs]).slice(0),
        pa.array([v for _, v in reversed_pairs], pa.int64()),
    )
    assert again == digest
    moment = datetime(2026, 1, 2, tzinfo=UTC)
    listed = json.loads(
        build_manifest("g1", moment, {0: 1}, {}, versions={"b": "b.versions.arrow"})
    )
    assert listed["versions"] == {"b": "b.versions.arrow"}
    assert (
        json.loads(build_manifest("g1", moment, {0: 1}, {}, versions={}))["versions"]
        == {}
    )
    assert "versions" not in json.loads(build_manifest("g1", moment, {0: 1}, {}))
