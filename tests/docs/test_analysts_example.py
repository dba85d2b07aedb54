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


def test_example_reproduces_top100_of_an_older_generation_and_reports_a_difference(
    spark: SparkSession, settings: Settings, api: SignedClient, tmp_path: Path
) -> None:
    """Then the check can fail: a tampered gold row is reported and exits 1 (on the
    same two generations: one publish fewer than a test of its own)."""
    boards_file = tmp_path / "boards.yaml"
    boards_file.write_text(BOARDS_YAML)
    settings = settings.model_copy(update={"boards_file": boards_file})
    # 130 players (more than 100) on a coarse grid, so that ties cross position 100.
    for i in range(130):
        _send(api, f"P{i:03d}", "M1", (i * 37) % 11 * 10)
        _send(api, f"P{i:03d}", "M2", (i * 13) % 5 * 10)
    g1 = run_publish(settings, spark=spark, bucket_target=10)
    rebase_published(settings, g1)
    # g2 changes scores (a downward correction, new matches): silver is overwritten,
    # so g1 can only be reproduced by time travel to g1's table versions.
    _send(api, "P005", "M1", 0, rev=2)
    for i in range(0, 130, 3):
        _send(api, f"P{i:03d}", "M3", 50)
    g2 = run_publish(settings, spark=spark, bucket_target=10)
    rebase_published(settings, g2)

    manifests = [
        json.loads((settings.segments_dir / g / "manifest.json").read_text())
        for g in (g1, g2)
    ]
    v1, v2 = (m["tableVersions"] for m in manifests)
    assert set(v1) == {
        "bronze_events",
        "silver_contributions",
        "silver_totals",
        "gold_snapshots",
    }
    assert all(v2[t] > v1[t] for t in v1), (v1, v2)

    example = _example()
    delta_dir = settings.delta_dir
    with serve(settings) as url:
        for generation in (g1, g2):
            result = example.check(delta_dir, url, BOARD, generation)
            assert result["rows"] == 100
            assert result["totals_match_contributions"] is True
            assert result["matches_gold"] is True
            assert result["matches_api"] is True
        # Time travel matters: g1's ranking differs from g2's.
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
        assert boundary == {p: v for p, v in manifests[0]["boundary"].items() if v}

        # The runnable script, as an analyst runs it.
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
        "ok: our ranking = gold_snapshots",
        "ok: our ranking = the API",
    ):
        assert line in done.stdout

    # The check can fail. gold changed after publication: time travel to the
    # recorded version still reads the published rows...
    ok: dict[str, Any] = example.check(delta_dir, None, BOARD, g2)
    assert ok["matches_gold"] is True and ok["rows"] == 100
    spark.sql(
        f"UPDATE delta.`{delta_dir / 'gold_snapshots'}` SET score = score + 1 "
        f"WHERE generation = '{g2}' AND board = '{BOARD}' AND position = 1"
    )
    assert example.check(delta_dir, None, BOARD, g2)["matches_gold"] is True
    # ...and a manifest pointing at the changed version is caught (exit 1).
    version = ok["tableVersions"]["gold_snapshots"]
    assert version == v2["gold_snapshots"]
    spark.sql(
        f"UPDATE delta.`{delta_dir / 'gold_manifest'}` SET manifest_json = replace("
        f"manifest_json, '\"gold_snapshots\": {version}', "
        f"'\"gold_snapshots\": {version + 1}') WHERE generation = '{g2}'"
    )
    done = _run("--board", BOARD, data_dir=settings.data_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"generation {g2}" in done.stdout
    assert "DIFFERS: our ranking = gold_snapshots" in done.stdout
    assert "skipped: our ranking = the API" in done.stdout
