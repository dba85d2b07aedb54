"""docs/examples/reproduce_top100.py runs: a published top-100 reproduced from the
Delta tables as of the generation's table versions, equal to gold and to the API."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pyspark.sql import SparkSession

from conf.settings import Settings
from jobs.publish import run_publish
from speed.rebase import rebase_published
from tests.conftest import SignedClient, event
from tests.live_server import serve
from tests.support.generations import board_reads, gold_entries

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "examples" / "reproduce_top100.py"
BOARDS_YAML = """\
regions: [eu, na]
seasons:
  - {id: AN, start: "2026-01-01T00:00:00Z", end: "2100-01-01T00:00:00Z"}
"""
BOARD = "season:AN:global"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reproduce_top100", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _send(
    api: SignedClient, player: str, match: str, points: int, rev: int = 1
) -> None:
    occurred = datetime.now(UTC) - timedelta(hours=2)
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=f"{player}-{match}-{rev}",
            playerId=player,
            matchId=match,
            sourceRevision=rev,
            occurredAt=occurred.strftime("%Y-%m-%dT%H:%M:%SZ"),
            region="eu" if int(player[1:]) % 2 else "na",
            result={"points": points},
            kind="correction" if rev > 1 else "result",
            reason="review" if rev > 1 else None,
        ),
    )
    assert reply.status_code == 200, reply.text


def _run(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LB_DATA_DIR=str(data_dir), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.timeout(1800)  # three Spark publishes: minutes on a loaded machine
def test_example_reproduces_older_and_layered_generations_and_reports_a_difference(
    spark: SparkSession,
    settings: Settings,
    api: SignedClient,
    tmp_path: Path,
) -> None:
    """One chain of three publishes for every check of the example (these were two
    tests of two and three publishes, the first publish of each on the same 260
    events; a Spark publish is most of their time): g1 a full base; g2 incremental
    with layering on, its serving files a layer over g1's; g3 a full recompute of
    g2's boundary.

    - The top 100 of each generation reproduced from the Delta tables as of its
      recorded versions equals gold and the API; g1 only by time travel (g2
      overwrote silver and moved players).
    - g2's gold is layered too: its changed rows in ``gold_changes`` over g1's
      ``gold_snapshots`` partition. The documented full-ranking query
      (``LAYERED_RANKING_SQL`` over both, DuckDB and Spark SQL) gives its full
      ranking: equal to the full recompute g3 (``FULL_RANKING_SQL``), to the
      merged layers the API serves, and to the example's silver ranking.
    - The check can fail: a tampered gold row of the newest generation is
      reported and the script exits 1."""
    assert settings.layers_max_chain >= 1  # layered generations: the default
    boards_file = tmp_path / "boards.yaml"
    boards_file.write_text(BOARDS_YAML)
    settings = settings.model_copy(update={"boards_file": boards_file})
    # 130 players (more than 100) on a coarse grid, so that ties cross position 100.
    for i in range(130):
        _send(api, f"P{i:03d}", "M1", (i * 37) % 11 * 10)
        _send(api, f"P{i:03d}", "M2", (i * 13) % 5 * 10)
    generations = [run_publish(settings, spark=spark, bucket_target=10)]
    rebase_published(settings, generations[-1])
    # A small delta (under LB_LAYERS_MAX_FRACTION of each board): a downward
    # correction and a few new matches; the publish is incremental and writes the
    # touched boards as a layer over g1's. Silver is overwritten, so g1 can only
    # be reproduced by time travel to g1's table versions.
    _send(api, "P002", "M1", 0, rev=2)
    for i in range(0, 30, 3):
        _send(api, f"P{i:03d}", "M3", 20)
    generations.append(run_publish(settings, spark=spark, bucket_target=10))
    rebase_published(settings, generations[-1])
    manifests = {
        g: json.loads((settings.segments_dir / g / "manifest.json").read_text())
        for g in generations
    }
    g1, g2 = generations
    assert "layers" not in manifests[g1]["boards"][BOARD]
    assert len(manifests[g2]["boards"][BOARD]["layers"]) == 1
    assert manifests[g2]["build"]["mode"] == "incremental"
    v1, v2 = (manifests[g]["tableVersions"] for g in generations)
    assert set(v1) == {
        "bronze_events",
        "silver_contributions",
        "silver_totals",
        "gold_snapshots",
    }
    # g2's gold is layered: its changes went to gold_changes, gold_snapshots
    # stayed as g1 left it.
    assert manifests[g2]["build"]["gold"] == {
        "base": g1,
        "layers": [g2],
        "rows": manifests[g2]["build"]["gold"]["rows"],
        "baseRows": sum(m["population"] for m in manifests[g1]["boards"].values()),
    }
    assert 0 < manifests[g2]["build"]["gold"]["rows"] < 130
    assert set(v2) == {*v1, "gold_changes"}
    assert v2["gold_snapshots"] == v1["gold_snapshots"]
    assert all(v2[t] > v1[t] for t in v1 if t != "gold_snapshots"), (v1, v2)
    # A full recompute of g2's boundary: a full base on every board.
    g3 = run_publish(settings, spark=spark, bucket_target=10, full=True)
    m3 = json.loads((settings.segments_dir / g3 / "manifest.json").read_text())
    assert m3["boundary"] == manifests[g2]["boundary"]
    assert "layers" not in m3["boards"][BOARD]

    example = _example()
    delta_dir = settings.delta_dir
    full = {
        g: example.ranking_duckdb(delta_dir, m, BOARD)
        for g, m in {**manifests, g3: m3}.items()
    }
    assert full[g2] == full[g3]
    assert len(full[g2]) == 130
    assert full[g1] != full[g2]  # time travel matters: g2 moved players
    # Spark SQL gives the same rows as DuckDB.
    assert example.ranking_spark(spark, delta_dir, manifests[g2], BOARD) == full[g2]
    assert example.ranking_spark(spark, delta_dir, m3, BOARD) == full[g3]
    # The merged layers (what the API serves for g2) are the same ranking.
    meta = manifests[g2]["boards"][BOARD]
    assert board_reads(settings.segments_dir / g2, BOARD, meta)["entries"] == full[g2]
    # The full recompute's gold and segment agree too (the same query, a full base).
    assert gold_entries(spark, settings, g3)[BOARD] == full[g3]
    meta = m3["boards"][BOARD]
    assert board_reads(settings.segments_dir / g3, BOARD, meta)["entries"] == full[g3]

    with serve(settings) as url:
        for generation in (g1, g2, g3):
            result = example.check(delta_dir, url, BOARD, generation)
            assert result["rows"] == 100
            assert result["totals_match_contributions"] is True
            assert result["matches_gold"] is True
            assert result["matches_api"] is True
        result = example.check(delta_dir, url, BOARD, g2)
        assert result["full_matches_ranking"] is True
        assert result["full_rows"] == 130
        # Time travel matters: g1's top 100 differs from g2's.
        first = example.check(delta_dir, None, BOARD, g1)["top"]
        assert first != example.check(delta_dir, None, BOARD, g2)["top"]
        # Spark SQL (VERSION AS OF) gives the same rows.
        assert example.top_spark(spark, delta_dir, v1, BOARD) == first
        # Bronze as of g1 ends exactly at g1's boundary.
        bronze = spark.sql(
            f"SELECT partition, max(position) AS last FROM delta.`"
            f"{delta_dir / 'bronze_events'}` VERSION AS OF {v1['bronze_events']} "
            "GROUP BY partition"
        ).collect()
        boundary = {str(r["partition"]): r["last"] for r in bronze}
        assert boundary == {p: v for p, v in manifests[g1]["boundary"].items() if v}

        # The runnable script, as an analyst runs it: an older generation...
        done = _run(
            "--api",
            url,
            "--board",
            BOARD,
            "--generation",
            g1,
            data_dir=settings.data_dir,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"generation {g1}" in done.stdout
        for line in (
            "ok: totals = contributions added up",
            "ok: our ranking = gold",
            "ok: our ranking = the API",
        ):
            assert line in done.stdout
        # ...and the layered one, every position of its full ranking.
        done = _run(
            "--api",
            url,
            "--board",
            BOARD,
            "--generation",
            g2,
            data_dir=settings.data_dir,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: full ranking = gold, every position" in done.stdout
    assert "full ranking: 130 rows in gold" in done.stdout

    # The check can fail (last: it changes the tables). gold changed after
    # publication: time travel to the recorded version still reads the
    # published rows...
    ok: dict[str, Any] = example.check(delta_dir, None, BOARD, g3)
    assert ok["matches_gold"] is True and ok["rows"] == 100
    spark.sql(
        f"UPDATE delta.`{delta_dir / 'gold_snapshots'}` SET score = score + 1 "
        f"WHERE generation = '{g3}' AND board = '{BOARD}' AND position = 1"
    )
    assert example.check(delta_dir, None, BOARD, g3)["matches_gold"] is True
    # ...and a manifest pointing at the changed version is caught (exit 1).
    version = ok["tableVersions"]["gold_snapshots"]
    assert version == m3["tableVersions"]["gold_snapshots"]
    spark.sql(
        f"UPDATE delta.`{delta_dir / 'gold_manifest'}` SET manifest_json = replace("
        f"manifest_json, '\"gold_snapshots\": {version}', "
        f"'\"gold_snapshots\": {version + 1}') WHERE generation = '{g3}'"
    )
    done = _run("--board", BOARD, data_dir=settings.data_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"generation {g3}" in done.stdout
    assert "DIFFERS: our ranking = gold" in done.stdout
    assert "skipped: our ranking = the API" in done.stdout
