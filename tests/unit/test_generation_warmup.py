"""serving/registry.py: a newer generation is warmed in a thread of its own while
reads go on (it is the latest at once), and the API's warmer (speed/live.py
generation_warmer) derives what the one before it had, so the live reads after the
rebase onto it do not derive it on the event loop."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from serving.files import atomic_write_text
from serving.manifest import MANIFEST_FILE, build_manifest
from serving.registry import Generation, GenerationRegistry
from serving.segments import write_segments
from speed.baserows import partition_rows, partition_rows_key
from speed.live import generation_warmer, row_counts_key

pytestmark = pytest.mark.unit

BOARD = "season:S4:global"
OTHER = "season:S4:eu"
PARTITIONS = 4


def write_generation(segments: Path, number: int) -> None:
    """A two-board generation as serving's writer lays it out."""
    directory = segments / f"g{number}"
    directory.mkdir(parents=True)
    players = [f"p{i}" for i in range(40)]
    table = pa.table(
        {
            "board": [BOARD] * 40 + [OTHER] * 40,
            "player_id": players + players,
            "score": pa.array(list(range(80, 0, -1)), pa.int64()),
        }
    )
    boards = write_segments(table, directory, 4)
    text = build_manifest(f"g{number}", datetime.now(UTC), {0: number}, boards)
    atomic_write_text(directory / MANIFEST_FILE, text)


def test_a_newer_generation_is_warmed_in_a_thread_while_reads_go_on(
    tmp_path: Path,
) -> None:
    release = threading.Event()
    calls: list[tuple[str, str, str]] = []

    def warmer(new: Generation, previous: Generation) -> None:
        calls.append((new.id, previous.id, threading.current_thread().name))
        assert release.wait(30)

    registry = GenerationRegistry(tmp_path, 3, warmer)
    write_generation(tmp_path, 1)
    registry.refresh(force=True)
    # The first generation has none before it: nothing to warm from.
    assert registry.warming() == [] and calls == []
    write_generation(tmp_path, 2)
    registry.refresh(force=True)
    # Visible at once (a read right after `lb publish` sees it), warming meanwhile.
    latest = registry.latest()
    assert latest is not None and latest.id == "g2"
    assert registry.warming() == ["g2"]
    assert registry.get("g2").board(BOARD) is not None
    release.set()
    assert registry.wait_warm(30)
    assert registry.warming() == []
    assert calls == [("g2", "g1", "warm-g2")]


def test_a_failed_warm_up_ends_the_warming(tmp_path: Path) -> None:
    def warmer(new: Generation, previous: Generation) -> None:
        raise RuntimeError("warming failed")

    registry = GenerationRegistry(tmp_path, 3, warmer)
    write_generation(tmp_path, 1)
    registry.refresh(force=True)
    write_generation(tmp_path, 2)
    registry.refresh(force=True)
    assert registry.wait_warm(30)
    latest = registry.latest()
    assert latest is not None and latest.id == "g2"


def test_the_api_warmer_derives_what_the_previous_generation_had(
    tmp_path: Path,
) -> None:
    registry = GenerationRegistry(tmp_path, 3, generation_warmer(PARTITIONS))
    write_generation(tmp_path, 1)
    registry.refresh(force=True)
    first = registry.latest()
    assert first is not None
    # Live reads of BOARD on g1: its partition rows and row counts; OTHER is
    # mapped (a snapshot read) but never read live.
    rows = partition_rows(first, BOARD, PARTITIONS)
    assert rows is not None
    first.derive(row_counts_key(BOARD, PARTITIONS), lambda: object())
    assert first.board(OTHER) is not None
    write_generation(tmp_path, 2)
    registry.refresh(force=True)
    assert registry.wait_warm(30)
    second = registry.latest()
    assert second is not None and second.id == "g2"
    assert second.mapped_boards() == [OTHER, BOARD]
    assert partition_rows_key(BOARD, PARTITIONS) in second.memo
    assert row_counts_key(BOARD, PARTITIONS) in second.memo
    assert partition_rows_key(OTHER, PARTITIONS) not in second.memo
    # What the warmer derived is what a read would derive.
    warmed = second.memo[partition_rows_key(BOARD, PARTITIONS)]
    assert warmed.local.tolist() == rows.local.tolist()
    assert [r.tolist() for r in warmed.rows] == [r.tolist() for r in rows.rows]


def test_derive_builds_once_for_concurrent_callers(tmp_path: Path) -> None:
    write_generation(tmp_path, 1)
    generation = GenerationRegistry(tmp_path, 1).latest()
    assert generation is not None
    started, release = threading.Event(), threading.Event()
    builds: list[int] = []

    def build() -> int:
        builds.append(1)
        started.set()
        assert release.wait(30)
        return 7

    results: list[int] = []
    first = threading.Thread(
        target=lambda: results.append(generation.derive("k", build))
    )
    first.start()
    assert started.wait(30)
    second = threading.Thread(
        target=lambda: results.append(generation.derive("k", build))
    )
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert results == [7, 7] and builds == [1]
