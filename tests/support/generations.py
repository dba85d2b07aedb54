"""Two published generations compared (gold rows, manifest board entries, segment
bytes), and one board's reads next to its gold rows: the checks of the incremental,
layered and option publish tests (real Spark and Delta)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from conf.boards import load_boards
from conf.rule_state import effective_boards, load_rule_state
from conf.settings import Settings
from jobs.quarantine import HISTOGRAM_FILE, load_histogram
from jobs.tables import generation_ranking
from serving.layers import LayeredSegment, load_board
from tests.support.incremental import manifest


def gold_frame(spark: SparkSession, settings: Settings, generation: str) -> DataFrame:
    """The generation's full ranking as gold stores it: its snapshot, or its
    layered chain ranked again (jobs/tables.py generation_ranking)."""
    boards = effective_boards(
        load_boards(settings.boards_file), load_rule_state(settings.data_dir)
    )
    return generation_ranking(
        spark, settings.delta_dir, generation, manifest(settings, generation), boards
    )


def gold_rows(spark: SparkSession, settings: Settings, generation: str) -> list:
    return sorted(tuple(r) for r in gold_frame(spark, settings, generation).collect())


def assert_same_generation(
    settings: Settings,
    a: str,
    b: str,
    spark: Any,
    settings_b: Settings | None = None,
) -> None:
    """Same gold rows, same board entries (checksums of every file), same bytes;
    ``b`` of ``settings_b``'s data directory when given (the same history
    published in two directories)."""
    other = settings_b or settings
    assert_df_equality(
        gold_frame(spark, settings, a),
        gold_frame(spark, other, b),
        ignore_row_order=True,
    )
    ma, mb = manifest(settings, a), manifest(other, b)
    assert sorted(ma["boards"]) == sorted(mb["boards"])
    for board, meta in ma["boards"].items():
        assert meta == mb["boards"][board], (board, meta, mb["boards"][board])
    assert ma["boundary"] == mb["boundary"]
    assert ma.get("quarantine") == mb.get("quarantine")
    # The histogram behind the thresholds, which the next publish extends: an
    # incremental one is its parent's plus the change, a full one aggregates
    # silver; both are saved in key order.
    histograms = [
        settings.segments_dir / a / HISTOGRAM_FILE,
        other.segments_dir / b / HISTOGRAM_FILE,
    ]
    assert load_histogram(histograms[0]) is not None
    assert histograms[0].read_bytes() == histograms[1].read_bytes()
    # The versions side files: the pairs named without a row (jobs/versions.py).
    assert ma["versions"] == mb["versions"]
    names = [n for m in ma["boards"].values() for n in segment_files(m)]
    for name in names + list(ma["versions"].values()):
        left = settings.segments_dir / a / name
        right = other.segments_dir / b / name
        assert left.read_bytes() == right.read_bytes(), name


def segment_files(meta: dict[str, Any]) -> list[str]:
    return [meta[k] for k in ("file", "index", "buckets", "hidden") if k in meta]


def board_reads(directory: Path, board: str, meta: dict[str, Any]) -> dict[str, Any]:
    segment = load_board(directory, board, meta)
    n = segment.population
    return {
        "entries": [
            (e["position"], e["rank"], e["playerId"], e["score"])
            for e in segment.entries(0, n)
        ],
        "rows": {p: segment.row_of(p) for p in ("a", "b", "c", "Zed", "x")},
        "versions": None
        if segment.versions is None
        else np.asarray(segment.versions).tolist(),
        "dense": [segment.distinct_above(s) for s in range(-1, 12)],
        "layered": isinstance(segment, LayeredSegment),
        "hidden": dict(segment.hidden),
    }


def gold_entries(spark: SparkSession, settings: Settings, generation: str) -> dict:
    rows = gold_frame(spark, settings, generation).collect()
    out: dict[str, list] = {}
    for r in sorted(rows, key=lambda r: (r["board"], r["position"])):
        out.setdefault(r["board"], []).append(
            (r["position"], r["rank"], r["player_id"], r["score"])
        )
    return out
