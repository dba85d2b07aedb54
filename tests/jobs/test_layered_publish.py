"""Layered generations from real incremental publishes (Spark + Delta): each
touched board gets a layer over its parent until the chain is due a compaction,
and every generation's reads equal its gold rows (a full ranking); the last, with
layered and compacted boards, equals a compacting publish (``compact=True``: every
board a full base) and a full recompute of the same boundary.

Marked slow (five Spark publishes, 630 s on a loaded machine): `make test` keeps
the reader's property test (tests/serving/test_layered.py) and the layered equality
test's one history (tests/jobs/test_layered_equality.py), and every incremental
publish in it is layered (on by default); `make test SLOW=1` runs this one."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from jobs.build import check_generation
from jobs.publish import run_publish
from speed.server import RedisServer
from tests.support.generations import board_reads, gold_entries
from tests.support.incremental import (
    OCCURRED,
    append_bronze,
    log_lines,
    make_settings,
    manifest,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


def _rec(
    player: str,
    match: int,
    points: int,
    *,
    revision: int = 1,
    at: int = 2,
    region: str = "eu",
    kind: int = 0,
) -> dict[str, Any]:
    return {
        "player": player,
        "match": match,
        "revision": revision,
        "points": points,
        "occurred": OCCURRED[at],
        "region": region,
        "late": False,
        "kind": kind,
    }


# Four batches: one full publish, then three incremental ones.
BATCHES = [
    [
        _rec("a", 0, 5),
        _rec("b", 0, 3, region="na"),
        _rec("c", 0, 4),
        _rec("Zed", 0, 2, at=1, region="na"),
        _rec("b", 1, 1, at=3),
    ],
    [_rec("a", 1, 2), _rec("b", 0, 1, revision=2, region="na")],
    [_rec("c", 1, 3, at=1), _rec("Zed", 0, 2, at=1, region="na", kind=1)],
    [_rec("a", 2, 4), _rec("c", 2, 1, at=3, region="na"), _rec("b", 2, 5, kind=2)],
]


def test_layered_chain_compacts_and_equals_a_full_recompute(
    spark: SparkSession, redis_server: RedisServer
) -> None:
    lines = log_lines([r for batch in BATCHES for r in batch])
    with tempfile.TemporaryDirectory(prefix="layered-") as tmp:
        settings = make_settings(Path(tmp), redis_server).model_copy(
            update={"layers_max_chain": 2, "layers_max_fraction": 10.0}
        )
        start = 0
        chains: list[dict[str, int]] = []
        for number, batch in enumerate(BATCHES, start=1):
            append_bronze(spark, settings, lines[start : start + len(batch)])
            start += len(batch)
            generation = f"g{number}"
            assert run_publish(settings, spark=spark, land=False, bucket_target=2) == (
                generation
            )
            boards = manifest(settings, generation)["boards"]
            chains.append({b: len(m.get("layers", ())) for b, m in boards.items()})
            gold = gold_entries(spark, settings, generation)
            directory = settings.segments_dir / generation
            for board, meta in boards.items():
                reads = board_reads(directory, board, meta)
                # Every read of the merged board is the full ranking's.
                assert reads["entries"] == gold.get(board, []), (generation, board)
        assert max(chains[1].values()) == 1  # g2: layers over g1's full bases
        # Gold is layered alike: g2 and g3 write their changes over g1's full
        # ranking; g4 passes the chain limit and writes a full one again.
        golds = [manifest(settings, f"g{n}")["build"].get("gold") for n in (2, 3, 4)]
        assert golds[0]["base"] == "g1" and golds[0]["layers"] == ["g2"]
        assert golds[1]["layers"] == ["g2", "g3"] and golds[2] is None
        # `lb verify --check-incremental` of g3: its chain of gold changes, ranked
        # again, and its served boards equal a full recompute.
        check = check_generation(settings, spark, "g3")
        assert check.rows > 0 and check.ok, check
        assert max(chains[2].values()) == 2  # g3: chains of two
        # g4: a board touched in g2, g3 and g4 is compacted (chain limit 2).
        compacted = [
            b for b, n in chains[3].items() if chains[2].get(b) == 2 and n == 0
        ]
        assert compacted, chains
        assert any(n > 0 for n in chains[3].values()), chains[3]
        # `lb verify --check-incremental` of g4: gold and every served board
        # (chains of layers and inline compactions) equal a full recompute.
        check = check_generation(settings, spark, "g4")
        assert check.ok and check.served_differences == (), check
        # `lb publish --compact` with nothing new: every board of g5 is a full
        # base (layered ones compacted from g4's chains, linking none of them).
        assert (
            run_publish(
                settings, spark=spark, land=False, bucket_target=2, compact=True
            )
            == "g5"
        )
        # A full recompute of g4's boundary: the same reads, versions and sides.
        assert (
            run_publish(settings, spark=spark, land=False, bucket_target=2, full=True)
            == "g6"
        )
        m4, m5, m6 = (manifest(settings, g) for g in ("g4", "g5", "g6"))
        assert sorted(m4["boards"]) == sorted(m5["boards"]) == sorted(m6["boards"])
        assert m4["versions"] == m6["versions"]
        for board in m4["boards"]:
            left = board_reads(settings.segments_dir / "g4", board, m4["boards"][board])
            compact = board_reads(
                settings.segments_dir / "g5", board, m5["boards"][board]
            )
            right = board_reads(
                settings.segments_dir / "g6", board, m6["boards"][board]
            )
            assert compact["layered"] is False and right["layered"] is False
            assert "layers" not in m5["boards"][board], board
            left.pop("layered"), compact.pop("layered"), right.pop("layered")
            assert left == right == compact, board
            if m4["boards"][board].get("layers"):
                # A compacted base is g5's own file, not a link to g4's chain.
                name = m5["boards"][board]["file"]
                g4_file = settings.segments_dir / "g4" / name
                g5_file = settings.segments_dir / "g5" / name
                assert g4_file.stat().st_ino != g5_file.stat().st_ino, board
