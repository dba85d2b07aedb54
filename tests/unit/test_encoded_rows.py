"""Base.encoded_range (rows encoded in one pass) equals encoding row by row."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.segments import BoardSegment
from speed.live import Base
from tests.support.segments import write_generation

pytestmark = pytest.mark.unit


def test_encoded_range_equals_row_by_row(tmp_path: Path) -> None:
    totals = {f"p{i}": (i * 37) % 1000 for i in range(500)}
    totals |= {"Jos\u00e9": 5, "zz": 2**40, "neg": -3, "x": 0}
    write_generation(tmp_path, 1, {"b": totals})
    segment = BoardSegment.load(tmp_path / "g1", "b", {})
    base = Base(None, segment)
    rows = segment.population
    assert base.encoded_range(0, rows) == [base.encoded(r) for r in range(rows)]
    assert base.encoded_range(7, 93) == [base.encoded(r) for r in range(7, 93)]
    assert base.encoded_range(5, 5) == []
    assert base.encoded_prefix(40) == [base.encoded(r) for r in range(40)]
