"""api/reads/policy.py: a live read that cannot be exact falls back to the latest
generation, looking for it on disk once more before answering 503."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from api.errors import NotReady
from api.reads.policy import FallbackPolicy
from conf.boards import load_boards
from serving.files import atomic_write_text
from serving.manifest import MANIFEST_FILE, build_manifest
from serving.registry import GenerationRegistry
from serving.segments import write_segments

pytestmark = pytest.mark.unit

BOARD = "season:S4:global"


def write_generation(segments: Path, number: int) -> None:
    """A one-board generation as serving's writer lays it out."""
    directory = segments / f"g{number}"
    directory.mkdir(parents=True)
    table = pa.table(
        {
            "board": [BOARD, BOARD],
            "player_id": ["a", "b"],
            "score": pa.array([20, 10], pa.int64()),
        }
    )
    boards = write_segments(table, directory, 2)
    text = build_manifest(f"g{number}", datetime.now(UTC), {0: 1}, boards)
    atomic_write_text(directory / MANIFEST_FILE, text)


def test_the_first_generation_is_found_before_the_registry_would_rescan(
    tmp_path: Path,
) -> None:
    """The first publish's rebase: the registry scanned an empty directory a moment
    ago, the manifest is written now; the fallback answers from it, not 503."""
    segments = tmp_path / "segments"
    segments.mkdir()
    registry = GenerationRegistry(segments, 2)
    policy = FallbackPolicy(load_boards(), registry)
    assert registry.latest() is None  # scanned: nothing yet
    with pytest.raises(NotReady):
        policy.fallback("a rebase is in progress")
    write_generation(segments, 1)
    assert policy.fallback("a rebase is in progress").number == 1


def test_without_any_generation_it_is_not_ready(tmp_path: Path) -> None:
    registry = GenerationRegistry(tmp_path, 2)
    with pytest.raises(NotReady, match=r"\(the board kept changing\).*retry shortly"):
        FallbackPolicy(load_boards(), registry).fallback("the board kept changing")
