"""lb replay: a season recomputed under v2 into season:S4@v2:<scope>, its diff
against an offline computation, the namespace readable through the API, promotion.

Migration (issue 26 item 4): between the replay and the promotion the data dir is
made one from before games (every Delta table without its ``game`` column) and the
boards file moves its keys under ``games: [{id: default, ...}]``; the promotion's
publishes, reads and rebuild then run on it as the game default, unchanged."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
import yaml
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from api.main import create_app
from conf.rule_state import load_rule_state
from conf.rules import default_registry
from conf.settings import Settings
from jobs.audit import audit_path
from jobs.replay import GOLD_REPLAY_DIFFS, run_replay
from jobs.spark import materialize
from jobs.tables import STATS_COLUMNS
from serving.registry import GenerationRegistry
from speed.audit import AUDIT_STREAM
from speed.partitions import Keys, partition_of
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration


def _strip_games(spark: SparkSession, delta_dir: Path) -> list[str]:
    """Rewrite every Delta table holding a ``game`` column without it (as tables
    landed before games were); the tables rewritten."""
    stripped = []
    for path in sorted(p for p in delta_dir.iterdir() if (p / "_delta_log").is_dir()):
        table = spark.read.format("delta").load(str(path))
        if "game" not in table.columns:
            continue
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
        assert detail is not None
        old = table.drop("game").transform(materialize)
        # Nor did such a table name statistics columns (silver names ``game``
        # among them, and Delta refuses a schema without a column they name).
        spark.sql(
            f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES IF EXISTS "
            f"('{STATS_COLUMNS}')"
        )
        (
            old.write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .partitionBy(*detail["partitionColumns"])
            .save(str(path))
        )
        stripped.append(path.name)
    return stripped


def _as_game_default(boards_file: Path, directory: Path) -> Path:
    """The same boards, listed as the one item ``default`` of ``games:``."""
    raw = yaml.safe_load(boards_file.read_text())
    path = directory / "games.yaml"
    path.write_text(yaml.safe_dump({"games": [{"id": "default", **raw}]}))
    return path


def _events() -> list[dict[str, Any]]:
    """Matches with both points (v1) and a match record (v2), a few points-only
    matches (v2 cannot score them), corrections, eu and na."""
    rng = random.Random(11)
    out: list[dict[str, Any]] = []
    for n in range(40):
        player = f"P{rng.randrange(12)}"
        record: dict[str, Any] = {"points": rng.randrange(0, 300, 10)}
        if n % 9 != 4:
            record |= {
                "placement": rng.randrange(1, 30),
                "kills": rng.randrange(0, 15),
                "durationSeconds": rng.randrange(60, 1800),
            }
        out.append(
            event(
                eventId=f"E{n}",
                playerId=player,
                matchId=f"M{n}",
                region="eu" if int(player[1:]) % 2 else "na",
                occurredAt=f"2026-11-{10 + n % 10:02d}T10:{n % 60:02d}:00Z",
                result=record,
            )
        )
    # Corrections: a new record for two matches (revision 2).
    for n in (3, 7):
        fix = dict(out[n])
        fix |= {
            "eventId": f"C{n}",
            "sourceRevision": 2,
            "kind": "correction",
            "reason": "recount",
            "result": {"points": 5, "placement": 1, "kills": 0, "durationSeconds": 60},
        }
        out.append(fix)
    return out


def _offline(
    events: list[dict[str, Any]], rule: str
) -> dict[str, dict[str, tuple[int, int]]]:
    """scope -> player -> (score, competition rank), the slow way."""
    registry = default_registry()
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:  # revisions only go up in this data
        last[(e["playerId"], e["matchId"])] = e
    totals: dict[str, dict[str, int]] = {}
    for (player, _), e in last.items():
        try:
            points = registry.get(rule).score(e["result"])
        except ValueError:
            continue  # the rule cannot score this record: no contribution
        for scope in ("global", e["region"]):
            board = totals.setdefault(scope, {})
            board[player] = board.get(player, 0) + points
    return {
        scope: {
            p: (s, 1 + sum(1 for t in board.values() if t > s))
            for p, s in board.items()
        }
        for scope, board in totals.items()
    }


def test_replay_diff_matches_offline(
    spark: SparkSession,
    settings: Settings,
    api: SignedClient,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    events = _events()
    for e in events:
        reply = api.post("/v1/score-events", e)
        assert reply.status_code == 200, reply.text
    summary = run_replay(settings, "S4", "v2", k=2, spark=spark)
    assert summary.generation == "g1"
    assert load_rule_state(settings.data_dir).replays == [("S4", "v2")]

    old, new = _offline(events, "v1"), _offline(events, "v2")
    # The premise: v2 reorders players, and some players only exist under v1.
    assert any(
        old["global"][p][1] != new["global"][p][1]
        for p in new["global"]
        if p in old["global"]
    )
    rows = (
        spark.read.format("delta")
        .load(str(settings.delta_dir / GOLD_REPLAY_DIFFS))
        .where(F.col("replay") == "S4@v2")
        .collect()
    )
    got = {
        (r["scope"], r["player_id"]): (
            r["old_score"],
            r["old_rank"],
            r["new_score"],
            r["new_rank"],
            r["move"],
        )
        for r in rows
    }
    expected = {}
    for scope in ("global", "eu", "na"):
        for player in set(old.get(scope, {})) | set(new.get(scope, {})):
            o = old.get(scope, {}).get(player, (None, None))
            n = new.get(scope, {}).get(player, (None, None))
            move = o[1] - n[1] if o[1] is not None and n[1] is not None else None
            expected[(scope, player)] = (o[0], o[1], n[0], n[1], move)
    assert got == expected
    moved = sum(
        1
        for (scope, _), v in expected.items()
        if scope == "global" and v[4] is not None and abs(v[4]) > 2
    )
    assert summary.scopes["global"]["moved"] == moved
    assert "S4 under v2 in g1" in summary.lines()[0]

    # The namespace reads like a board (snapshot), and is not listed publicly.
    top = api.get(
        "/v1/boards/season:S4@v2:global/top", params={"mode": "snapshot", "limit": 100}
    ).json()
    assert {e["playerId"]: (e["score"], e["rank"]) for e in top["entries"]} == new[
        "global"
    ]
    listed = {b["board"] for b in api.get("/v1/boards").json()["boards"]}
    assert "season:S4:global" in listed
    assert not any("@" in b for b in listed)
    assert api.get("/v1/boards/season:S4@v9:global/top").status_code == 404

    # Migration: a data dir from before games, served from a boards file with games.
    stripped = _strip_games(spark, settings.delta_dir)
    assert {"bronze_events", "silver_totals", GOLD_REPLAY_DIFFS} <= set(stripped)
    settings = settings.model_copy(
        update={"boards_file": _as_game_default(settings.boards_file, tmp_path)}
    )

    # Promotion: audited, and the season itself scores under v2 from a new generation.
    promoted = run_replay(
        settings, "S4", "v2", k=2, promote=True, reason="approved", spark=spark
    )
    assert promoted.promoted == "g3"
    assert load_rule_state(settings.data_dir).promoted == {"S4": "v2"}
    season = api.get(
        "/v1/boards/season:S4:global/top",
        params={"generation": "g3", "limit": 100},
    ).json()
    assert {e["playerId"]: (e["score"], e["rank"]) for e in season["entries"]} == new[
        "global"
    ]
    # The promotion's publish landed the audit entry into gold_audit.
    audit = spark.read.format("delta").load(str(audit_path(settings))).collect()
    (entry,) = [a for a in audit if a["action"] == "rule.promote"]
    assert (entry["subject"], entry["reason"]) == ("season:S4", "approved")
    # The tables gained their game column back; the rows from before read null
    # (the game default's), the promotion's replay diff rows name it.
    diffs = spark.read.format("delta").load(str(settings.delta_dir / GOLD_REPLAY_DIFFS))
    assert {r["game"] for r in diffs.collect()} == {"default"}
    totals = spark.read.format("delta").load(str(settings.delta_dir / "silver_totals"))
    assert {r["game"] for r in totals.select("game").distinct().collect()} == {
        "default"
    }
    details = orjson.loads(entry["details"])
    assert (details["from"], details["to"], details["replayGeneration"]) == (
        "v1",
        "v2",
        "g2",
    )
    assert redis_client.xlen(AUDIT_STREAM) == 0

    # Live answers follow the promoted rule too: the speed layer was rebuilt from the
    # log under v2, so Redis' totals over its base generation (Redis holds only the
    # players changed since: issue 11 item 1) are the offline v2 totals ...
    generations = GenerationRegistry(
        settings.segments_dir, settings.retained_generations
    )
    generations.refresh(force=True)
    for scope in ("global", "eu", "na"):
        board = f"season:S4:{scope}"
        live: dict[str, int] = {}
        for p in range(settings.partitions):
            number = int(redis_client.hget(Keys(p).base_generation, "g") or 0)
            base = generations.by_number(number) if number else None
            segment = base.board(board) if base is not None else None
            for row in range(segment.population if segment is not None else 0):
                player = segment.players.str_at(row)  # type: ignore[union-attr]
                if partition_of(player, settings.partitions) == p:
                    live[player] = int(segment.scores[row])  # type: ignore[union-attr]
            for player, value in redis_client.hgetall(Keys(p).totals(board)).items():
                live[player.decode()] = int(value.split(b"|")[0])
        assert live == {p: s for p, (s, _) in new.get(scope, {}).items()}, scope
    # ... and a new match and a correction after the promotion (an API started
    # under the promoted rule) move the live board exactly as the offline v2 sort.
    later = [
        event(
            eventId="N1",
            playerId="P3",
            matchId="N1",
            region="eu",
            occurredAt="2026-11-21T10:00:00Z",
            result={"points": 10, "placement": 2, "kills": 1, "durationSeconds": 600},
        ),
        {
            **events[5],
            "eventId": "C5",
            "sourceRevision": 3,
            "kind": "correction",
            "reason": "recount",
            "result": {"points": 0, "placement": 9, "kills": 4, "durationSeconds": 300},
        },
    ]
    with TestClient(create_app(settings)) as client:
        promoted_api = SignedClient(client)
        for e in later:
            reply = promoted_api.post("/v1/score-events", e)
            assert reply.status_code == 200, reply.text
        top = promoted_api.get(
            "/v1/boards/season:S4:global/top", params={"limit": 100}
        ).json()
    assert (top["exactness"], top["basis"]) == ("exact", "live")
    expected = _offline(events + later, "v2")["global"]
    assert {e["playerId"]: (e["score"], e["rank"]) for e in top["entries"]} == expected
