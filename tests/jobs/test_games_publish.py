"""Games through the batch layer (issue 26): two games with the same board, player,
match and event ids, one of them ranking by the best match, stay apart in one Spark
publish (snapshot reads, Delta's ``game`` column), in ``lb verify --game``, in a
rebuild of the speed layer and in a season close with ``--game`` (awards)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from api.main import create_app
from api.served import served_reads
from conf.settings import Settings
from jobs.publish import run_publish
from jobs.rebuild import run_rebuild
from jobs.season import close_season
from jobs.tables import SILVER_TOTALS
from jobs.verify import run_verify
from speed.rebase import rebase_published
from tests.support.clients import SignedClient, event
from tests.support.season import iso, wait_until

pytestmark = pytest.mark.integration

BOARD = "season:S9:global"
DAILY_SCOPE = "eu"
# game -> (player, match, revision, points); the same ids in both games.
EVENTS = {
    "default": [("P1", "M1", 1, 10), ("P1", "M2", 1, 30), ("P2", "M1", 1, 25)],
    "arena": [("P1", "M1", 1, 50), ("P1", "M2", 1, 5), ("P2", "M1", 1, 40)],
}
# Season S9: default sums, arena keeps the best match (per-game rules).
EXPECTED = {"default": {"P1": 40, "P2": 25}, "arena": {"P1": 50, "P2": 40}}


def games_file(path: Path, end: datetime) -> Path:
    def season(aggregation: str) -> str:
        return (
            "    regions: [eu]\n"
            '    windowLateness: "P3650D"\n'
            "    seasons:\n"
            "      - id: S9\n"
            f'        start: "{iso(end - timedelta(days=1))}"\n'
            f'        end: "{iso(end)}"\n'
            '        allowedLateness: "PT3S"\n'
            f"        aggregation: {aggregation}\n"
            "        tiers: [{name: champion, top: 1}]\n"
        )

    path.write_text(
        f"games:\n  - id: default\n{season('sum')}  - id: arena\n{season('max')}"
    )
    return path


def scores(body: dict[str, Any]) -> dict[str, int]:
    return {e["playerId"]: e["score"] for e in body["entries"]}


def test_two_games_stay_apart_through_publish_verify_rebuild_and_close(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    end = datetime.now(UTC) + timedelta(seconds=5)
    base = settings.model_copy(
        update={"boards_file": games_file(tmp_path / "games.yaml", end)}
    )
    played = end - timedelta(minutes=10)
    with TestClient(create_app(base)) as client:
        api = SignedClient(client)
        for game, events in EVENTS.items():
            for player, match, revision, points in events:
                reply = api.post(
                    f"/v1/games/{game}/score-events",
                    event(
                        eventId=f"{player}-{match}",
                        playerId=player,
                        matchId=match,
                        sourceRevision=revision,
                        occurredAt=iso(played),
                        region="eu",
                        result={"points": points},
                    ),
                )
                assert reply.status_code == 200, reply.text
                assert reply.json()["status"] == "accepted", reply.text

        generation = run_publish(base, spark=spark)
        assert set(rebase_published(base, generation).partitions.values()) == {"ok"}
        client.app.state.generations.refresh(force=True)
        for game, want in EXPECTED.items():
            prefix = f"/v1/games/{game}/boards/{BOARD}"
            snap = api.get(f"{prefix}/top", params={"mode": "snapshot"}).json()
            assert snap["basis"] == "snapshot", snap
            assert scores(snap) == want, (game, snap)
            assert scores(api.get(f"{prefix}/top").json()) == want, game
        # Delta: bronze from the events, silver from the boards.
        bronze = spark.read.format("delta").load(str(base.delta_dir / "bronze_events"))
        assert {r["game"] for r in bronze.select("game").collect()} == set(EVENTS)
        totals = spark.read.format("delta").load(str(base.delta_dir / SILVER_TOTALS))
        season_rows = totals.where(totals.board.endswith(BOARD)).collect()
        assert {(r["game"], r["player_id"], r["score"]) for r in season_rows} == {
            (g, p, s) for g, want in EXPECTED.items() for p, s in want.items()
        }

        for game in EXPECTED:
            with served_reads(base) as served:
                result = run_verify(
                    base, served, spark=spark, board=BOARD, sample=5, seed=1, game=game
                )
            assert result.ok, (game, result.divergences)
        intact = run_rebuild(base, spark=spark, dry_run=True)
        assert intact.differences == [], [str(d) for d in intact.differences[:5]]

        wait_until(end + timedelta(seconds=3))
        snapshot = close_season(base, "arena~S9", spark=spark)
        assert snapshot.version == 1
        awards = api.get(f"/v1/games/arena/boards/{BOARD}/awards").json()
        assert [(e["playerId"], e["score"], e["tier"]) for e in awards["entries"]] == [
            ("P1", 50, "champion"),
            ("P2", 40, None),
        ]
        # gold_awards: the rows of arena's season, with their game.
        landed = spark.read.format("delta").load(str(base.delta_dir / "gold_awards"))
        rows = landed.collect()
        assert {(r["game"], r["season"]) for r in rows} == {("arena", "arena~S9")}
        assert {
            (r["player_id"], r["score"]) for r in rows if r["board"] == f"arena~{BOARD}"
        } == {("P1", 50), ("P2", 40)}
        # The game default's season S9 is not closed.
        missing = api.get(f"/v1/boards/{BOARD}/awards")
        assert missing.status_code == 404, missing.text
        assert missing.json()["error"] == "awards_not_found"
