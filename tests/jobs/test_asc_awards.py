"""Awards of an ``order: asc`` best-of season (issue 27): after the close, the
award snapshot, its API read, ``gold_awards`` and the DAG's check (verify_awards)
rank the lowest best match first and show real scores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from api.main import create_app
from api.served import served_reads
from conf.settings import Settings
from jobs.season import GOLD_AWARDS, close_season
from jobs.season_ops import verify_awards
from tests.support.clients import SignedClient
from tests.support.season import post, season_settings, wait_until

pytestmark = pytest.mark.integration


def test_asc_best_season_awards(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    end = datetime.now(UTC) + timedelta(seconds=4)
    base = season_settings(settings, tmp_path, end)
    assert base.boards_file is not None
    text = base.boards_file.read_text().replace(
        "    aggregation: sum\n", "    aggregation: best\n    order: asc\n"
    )
    assert "order: asc" in text
    base.boards_file.write_text(text)
    played = end - timedelta(minutes=10)
    board = "season:S9:global"
    with TestClient(create_app(base)) as client:
        api = SignedClient(client)
        # Race times: the best (lowest) match counts.
        for player, match, points in (
            ("P1", "M1", 70),
            ("P1", "M2", 40),  # P1's best: 40
            ("P2", "M1", 55),
            ("P3", "M1", 55),
            ("P4", "M1", 90),
        ):
            post(api, player, match, points, played)
        wait_until(end + timedelta(seconds=3))
        snapshot = close_season(base, "S9", spark=spark)
        assert snapshot.version == 1
        awards = api.get(f"/v1/boards/{board}/awards").json()
        assert [
            (e["rank"], e["playerId"], e["score"], e["tier"]) for e in awards["entries"]
        ] == [
            (1, "P1", 40, "champion"),
            (2, "P2", 55, "podium"),
            (2, "P3", 55, "podium"),
            (4, "P4", 90, None),
        ]
        top = api.get(f"/v1/boards/{board}/top").json()
        assert [(e["playerId"], e["score"]) for e in top["entries"]] == [
            ("P1", 40),
            ("P2", 55),
            ("P3", 55),
            ("P4", 90),
        ]
        with served_reads(base) as served:
            report = verify_awards(base, "S9", served, spark=spark)
        assert report["divergences"] == [], report
    rows = (
        spark.read.format("delta")
        .load(str(base.delta_dir / GOLD_AWARDS))
        .where(f"board = '{board}'")
        .orderBy("position")
        .collect()
    )
    assert [(r["rank"], r["player_id"], r["score"]) for r in rows] == [
        (1, "P1", 40),
        (2, "P2", 55),
        (2, "P3", 55),
        (4, "P4", 90),
    ]
