"""The Airflow step publish (dags/publish_generation.py: land, recompute, publish,
rebase steps) records when landing started, so a generation published that way is
final for the boards closed before it and their speed-layer keys leave Redis, as
with `lb publish` (real Redis, Spark, Delta)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from api.main import create_app
from conf.settings import Settings
from jobs.publish_steps import land_step, publish_step, rebase_step, recompute_step
from speed.partitions import Keys, partition_of
from tests.conftest import SignedClient
from tests.support.season import post, season_settings, wait_until

pytestmark = pytest.mark.integration


def test_step_publish_drops_the_keys_of_boards_closed_before_it(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    end = datetime.now(UTC) + timedelta(seconds=2)
    cfg = season_settings(settings, tmp_path, end)
    board, open_board = "season:S9:global", "alltime:all:global"
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        for player, points in (("P1", 30), ("P2", 20)):
            post(api, player, "M1", points, end - timedelta(minutes=5))
        keys = Keys(partition_of("P1", cfg.partitions))
        assert redis_client.exists(keys.totals(board))  # the premise
        wait_until(end + timedelta(seconds=3))  # S9 closed (lateness PT3S)

        landed = land_step(cfg, spark)
        started = datetime.fromisoformat(landed["landingStartedAt"])
        assert started > end + timedelta(seconds=3)
        generation = recompute_step(cfg, landed, spark)
        assert publish_step(cfg, generation, landed, spark) == generation
        manifest = orjson.loads(
            (cfg.segments_dir / generation / "manifest.json").read_bytes()
        )
        assert manifest["landingStartedAt"]
        assert set(rebase_step(cfg, generation).values()) == {"ok"}

        for partition in range(cfg.partitions):
            k = Keys(partition)
            for name in (k.totals(board), k.fenwick(board), k.buckets(board)):
                assert not redis_client.exists(name), name
        # Open boards keep their keys (totals only of players changed since the
        # boundary: none here); the closed one reads from the generation.
        kept = (keys.fenwick(open_board), keys.buckets(open_board))
        assert redis_client.exists(*kept) == 2
        api.client.app.state.generations.refresh(force=True)  # type: ignore[attr-defined]
        top = api.get(f"/v1/boards/{board}/top").json()
        assert [(e["playerId"], e["score"]) for e in top["entries"]] == [
            ("P1", 30),
            ("P2", 20),
        ]
        assert top["basis"] == "snapshot"
