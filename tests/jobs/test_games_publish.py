"""Games through the batch layer (issue 26): two games with the same board, player,
match and event ids, one of them ranking by the best match, stay apart in one Spark
publish (snapshot reads, Delta's ``game`` column), in ``lb verify --game``, in a
rebuild of the speed layer, in a replay and promotion of arena's season under v2
(the game default's season of the same id untouched) and in a season close with
``--game`` (awards)."""

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
from conf.boards import load_boards
from conf.rule_state import effective_boards, load_rule_state
from conf.rules import default_registry
from conf.settings import Settings
from jobs.rebuild import run_rebuild
from jobs.replay import GOLD_REPLAY_DIFFS, promote_season, run_replay
from jobs.season import close_season
from jobs.tables import SILVER_TOTALS
from jobs.verify import run_verify
from tests.support.clients import SignedClient, event
from tests.support.lb import lb, lb_env
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
# The match records (the same in both games) that v2 scores: (placement, kills,
# durationSeconds) per (player, match).
RECORDS = {
    ("P1", "M1"): (1, 0, 60),
    ("P1", "M2"): (20, 1, 120),
    ("P2", "M1"): (2, 3, 600),
}


def record(player: str, match: str, points: int) -> dict[str, int]:
    placement, kills, duration = RECORDS[(player, match)]
    return {
        "points": points,
        "placement": placement,
        "kills": kills,
        "durationSeconds": duration,
    }


def offline_v2_arena() -> dict[str, int]:
    """arena's S9 under v2, the slow way: each player's best match."""
    v2 = default_registry().get("v2")
    best: dict[str, int] = {}
    for player, match, _, points in EVENTS["arena"]:
        value = v2.score(record(player, match, points))
        best[player] = max(best.get(player, value), value)
    return best


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
                        # A minute apart: v2's points-per-minute bound holds.
                        occurredAt=iso(played - timedelta(minutes=int(match[1:]))),
                        region="eu",
                        result=record(player, match, points),
                    ),
                )
                assert reply.status_code == 200, reply.text
                assert reply.json()["status"] == "accepted", reply.text

        # lb replay --game: an unknown game, and a season the game does not have,
        # are usage errors naming them (before any Spark or Redis).
        env = lb_env(tmp_path, LB_BOARDS_FILE=str(base.boards_file))
        for args, says in (
            (("--game", "duel", "--season", "S9"), "no game 'duel'"),
            (("--game", "arena", "--season", "S4"), "no season 'S4' in game 'arena'"),
        ):
            done = lb("replay", *args, "--rule", "v2", env=env)
            assert done.returncode == 2, done.stderr
            assert says in done.stderr, done.stderr
        # One publish for both games: the replay of arena's S9 under v2 (it
        # publishes every board plus arena's S9@v2 boards, and rebases). Until
        # session 20 a plain publish (g1) came first; the replay's generation holds
        # the same boards, so the publish checks below read it.
        v2 = offline_v2_arena()
        assert v2 != EXPECTED["arena"]  # the premise: v2 reorders arena's S9
        summary = run_replay(base, "S9", "v2", k=0, spark=spark, game="arena")
        assert (summary.generation, summary.promoted) == ("g1", None)
        assert "S9 of game arena under v2 in g1" in summary.lines()[0]
        state = load_rule_state(base.data_dir)
        assert state.replays == [("arena~S9", "v2")]
        assert state.promoted == {}
        client.app.state.generations.refresh(force=True)
        for game, want in EXPECTED.items():
            prefix = f"/v1/games/{game}/boards/{BOARD}"
            snap = api.get(f"{prefix}/top", params={"mode": "snapshot"}).json()
            assert snap["basis"] == "snapshot", snap
            assert (snap["generation"]["id"], scores(snap)) == ("g1", want), game
            assert scores(api.get(f"{prefix}/top").json()) == want, game
        # Delta: bronze from the events, silver from the boards.
        bronze = spark.read.format("delta").load(str(base.delta_dir / "bronze_events"))
        assert {r["game"] for r in bronze.select("game").collect()} == set(EVENTS)
        totals = spark.read.format("delta").load(str(base.delta_dir / SILVER_TOTALS))
        season_rows = totals.where(totals.board.endswith(BOARD)).collect()
        assert {(r["game"], r["player_id"], r["score"]) for r in season_rows} == {
            (g, p, s) for g, want in EXPECTED.items() for p, s in want.items()
        }
        # `lb verify --game` per game of one generation (the same ids in both) is
        # tests/e2e/test_games_isolation.py's, after its close; arena's verify under
        # v2 is below.
        intact = run_rebuild(base, spark=spark, dry_run=True)
        assert intact.differences == [], [str(d) for d in intact.differences[:5]]
        # The diff rows: arena's, old (v1, best match) against new (v2) ranks.
        diffs = spark.read.format("delta").load(str(base.delta_dir / GOLD_REPLAY_DIFFS))
        old_rank = {"P1": 1, "P2": 2}
        new_rank = {p: 1 + sum(1 for o in v2.values() if o > s) for p, s in v2.items()}
        assert {
            (r["game"], r["replay"], r["scope"], r["player_id"])
            + (r["old_score"], r["new_score"], r["move"])
            for r in diffs.collect()
        } == {
            ("arena", "arena~S9@v2", scope, p, EXPECTED["arena"][p], v2[p])
            + (old_rank[p] - new_rank[p],)
            for scope in ("global", DAILY_SCOPE)
            for p in v2
        }

        # Promote arena's S9 to v2: the game default's S9 (same season, board and
        # player ids) keeps its rule, boards and (no) awards. (`run_replay(...,
        # promote=True)`, the two in one call, is tests/jobs/test_replay.py's.)
        promoted = promote_season(
            base,
            "S9",
            "v2",
            actor="cli",
            reason="v2",
            replay_generation=summary.generation,
            scopes=summary.scopes,
            spark=spark,
            game="arena",
        )
        assert promoted == "g2"
        state = load_rule_state(base.data_dir)
        assert state.replays == [("arena~S9", "v2")]
        assert state.promoted == {"arena~S9": "v2"}
        rules = effective_boards(load_boards(base.boards_file), state)
        assert [rules.game(g).season("S9").rule for g in EXPECTED] == ["v1", "v2"]  # type: ignore[union-attr]
        client.app.state.generations.refresh(force=True)
        assert (
            "arena~season:S9@v2:global"
            in client.app.state.generations.get(None).board_names()
        )
        assert (
            "season:S9@v2:global"
            not in client.app.state.generations.get(None).board_names()
        )
        for path, want in (
            (f"/v1/games/arena/boards/season:S9@v2:{DAILY_SCOPE}", v2),
            (f"/v1/games/arena/boards/{BOARD}", v2),
            (f"/v1/games/default/boards/{BOARD}", EXPECTED["default"]),
            (f"/v1/boards/{BOARD}", EXPECTED["default"]),
        ):
            snap = api.get(f"{path}/top", params={"mode": "snapshot"}).json()
            assert (snap["generation"]["id"], scores(snap)) == ("g2", want), path
            if "@" not in path:  # live: the promotion's rebuild of the speed layer
                assert scores(api.get(f"{path}/top").json()) == want, path
        listed = api.get("/v1/games/arena/boards").json()["boards"]
        assert not any("@" in b["board"] for b in listed)
        with served_reads(base) as served:
            result = run_verify(
                base,
                served,
                spark=spark,
                board="season:S9@v2:global",
                sample=5,
                seed=1,
                game="arena",
            )
        assert result.ok, result.divergences

        wait_until(end + timedelta(seconds=3))
        snapshot = close_season(base, "arena~S9", spark=spark)
        assert snapshot.version == 1
        awards = api.get(f"/v1/games/arena/boards/{BOARD}/awards").json()
        # arena's S9 closed under its promoted rule v2.
        assert awards["rule"] == "v2", awards
        champion = max(v2, key=lambda p: v2[p])
        assert [(e["playerId"], e["score"], e["tier"]) for e in awards["entries"]] == [
            (p, v2[p], "champion" if p == champion else None)
            for p in sorted(v2, key=lambda p: -v2[p])
        ]
        # gold_awards: the rows of arena's season, with their game.
        landed = spark.read.format("delta").load(str(base.delta_dir / "gold_awards"))
        rows = landed.collect()
        assert {(r["game"], r["season"]) for r in rows} == {("arena", "arena~S9")}
        assert {
            (r["player_id"], r["score"]) for r in rows if r["board"] == f"arena~{BOARD}"
        } == set(v2.items())
        # The game default's season S9 is not closed.
        missing = api.get(f"/v1/boards/{BOARD}/awards")
        assert missing.status_code == 404, missing.text
        assert missing.json()["error"] == "awards_not_found"
