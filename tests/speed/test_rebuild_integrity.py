"""`lb rebuild` with the integrity features in the log: per-board rules (v2 season),
a shadowed player, quarantined events (one released, one still held). After the
derived keys are wiped, the rebuild gives the same answers and the same Redis state.
Flags, held events, friends and the plausibility history are operator state, not
derived from the log: they are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from api.main import create_app
from conf.settings import Settings
from jobs.publish import run_publish
from jobs.rebuild import run_rebuild
from speed.partitions import Keys, partition_of
from speed.rebase import rebase_published
from tests.conftest import OPEN_LATENESS, SignedClient, event
from tests.support.rebuild import speed_keys

pytestmark = pytest.mark.integration

BOARDS_YAML = """
regions: [eu, na]
rule: v1
seasons:
  - {id: S4, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN", aggregation: sum, rule: v2}
""".replace("OPEN", OPEN_LATENESS)  # open whatever the date
BOARDS = ["season:S4:global", "season:S4:eu", "alltime:all:global", "alltime:all:na"]
PLAYERS = [f"p{i}" for i in range(12)]
KEPT = (":flags", ":qr", ":fr:", ":pm:", "{audit}")


def send(api: SignedClient, n: int, player: str, kills: int, points: int) -> Any:
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=f"e{n}",
            playerId=player,
            matchId=f"m{n}",
            region="eu" if int(player[1:]) % 2 == 0 else "na",
            occurredAt=f"2026-11-{10 + n % 15:02d}T{n % 24:02d}:00:00Z",
            result={
                "points": points,
                "placement": 1 + n % 30,
                "kills": kills,
                "durationSeconds": 600,
            },
        ),
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def answers(api: SignedClient) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for board in BOARDS:
        out[f"top {board}"] = api.get(f"/v1/boards/{board}/top").json()
        for player in PLAYERS:
            for mode in ("live", "approx"):
                reply = api.get(
                    f"/v1/boards/{board}/players/{player}", params={"mode": mode}
                )
                out[f"{mode} {board} {player}"] = (reply.status_code, reply.json())
    return out


def derived(client: redis.Redis) -> dict[bytes, Any]:
    return {
        k: v
        for k, v in speed_keys(client).items()
        if not any(part in k.decode() for part in KEPT)
    }


def test_rebuild_with_rules_shadow_and_quarantine(
    spark: SparkSession, settings: Settings, tmp_path: Path, redis_client: redis.Redis
) -> None:
    path = tmp_path / "boards.yaml"
    path.write_text(BOARDS_YAML)
    config = settings.model_copy(
        update={
            "boards_file": path,
            "quarantine_quantile": 0.9,
            "quarantine_min_samples": 5,
        }
    )
    with TestClient(create_app(config)) as client:
        api = SignedClient(client)
        admin = SignedClient(client, "admin", b"dev-admin-secret")
        for i, player in enumerate(PLAYERS):
            send(api, i, player, i % 5, 10 * (i + 1))
        generation = run_publish(config, spark=spark, bucket_target=3)
        rebase_published(config, generation)
        # After the generation: a shadowed player, a held event released, one held.
        flag = {"action": "shadow", "reason": "report"}
        assert admin.post("/v1/admin/players/p1/flags", flag).status_code == 200
        assert send(api, 20, "p3", 25, 5000)["status"] == "quarantined"
        assert send(api, 21, "p4", 25, 6000)["status"] == "quarantined"
        decision = {"action": "release", "reason": "ok"}
        released = admin.post("/v1/admin/quarantine/e20", decision)
        assert released.json()["result"]["status"] == "accepted"
        for n in range(22, 26):
            send(api, n, PLAYERS[n % 12], 1, 20)
        before_answers = answers(api)
        before_keys = derived(redis_client)
        # The premise: every feature left state in Redis.
        names = b" ".join(before_keys)
        assert b":rc:" in names and b":chz:" in names
        held = Keys(partition_of("p4", config.partitions)).quarantine
        assert redis_client.hlen(held) == 1

        for key in list(redis_client.scan_iter(match="lb:*")):
            text = key.decode()
            if redis_client.type(key) != b"stream" and not any(
                part in text for part in KEPT
            ):
                redis_client.delete(key)
        report = run_rebuild(config, spark=spark)
        assert set(report.partitions.values()) == {"ok"}
        assert derived(redis_client) == before_keys
        assert answers(api) == before_answers
