"""bench.layered_reads on a small board: it runs, and the layered and compacted
segments answer every read alike (the bench asserts it on every probe)."""

from __future__ import annotations

import pytest

from bench.layered_reads import parse_args, run

pytestmark = pytest.mark.unit


def test_the_layered_reads_bench_compares_equal_answers() -> None:
    args = parse_args(
        ["--players", "3000", "--layers", "3", "--layer-players", "300"]
        + ["--probes", "200", "--rounds", "1"]
    )
    args.load_before = [0.0, 0.0, 0.0]
    report = run(args)
    assert set(report["reads"]) == {
        "row_of",
        "rank",
        "nearby5",
        "dense_counts",
        "live_window",
        "top100",
    }
    assert 0 < report["layer_rows"] <= 900
    assert all(r["layered_us"] > 0 for r in report["reads"].values())
