"""Season lifecycle against real Redis, Spark and Delta: a season that closes during
the test, the award snapshot, idempotent and crash-safe close, late review,
adjudication, closed windows leaving Redis."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from api.main import create_app
from api.security import sign
from api.served import ServedReads, served_reads
from conf.settings import Settings
from jobs.audit import audit_path, land_audit
from jobs.season import GOLD_AWARDS, SeasonError, close_season
from jobs.season_ops import verify_awards
from serving.awards import AwardsError, read_version, season_dir
from speed.partitions import Keys
from tests.conftest import SignedClient
from tests.support.jobs import oracle_ranking
from tests.support.season import iso, post, season_settings, wait_until

pytestmark = pytest.mark.integration

ADMIN_SECRET = b"dev-admin-secret"


def admin_get(api: SignedClient, path: str) -> Any:
    headers = {"X-Key-Id": "admin", "X-Signature": sign(ADMIN_SECRET, b"")}
    return api.client.get(path, headers=headers)


def board_status(body: dict[str, Any], board: str) -> str:
    (item,) = [b for b in body["boards"] if b["board"] == board]
    return str(item.get("status", body["status"]))


def dir_digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
    }


class PlantedAward:
    """Served reads whose award for ``board`` serves its first score one higher."""

    def __init__(self, served: ServedReads, board: str) -> None:
        self.served = served
        self.board = board

    def __getattr__(self, name: str) -> Any:
        return getattr(self.served, name)

    def awards(
        self, board: str, cursor: str | None = None, limit: int = 1000
    ) -> dict[str, Any] | None:
        body = self.served.awards(board, cursor, limit)
        if body is not None and board == self.board and cursor is None:
            first = {**body["entries"][0], "score": body["entries"][0]["score"] + 1}
            body = {**body, "entries": [first, *body["entries"][1:]]}
        return body


def test_season_closes_awards_and_adjudication(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    end = datetime.now(UTC) + timedelta(seconds=4)
    cfg = season_settings(settings, tmp_path, end)
    played = end - timedelta(minutes=10)
    board = "season:S9:global"
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        for player, points in (("P1", 100), ("P2", 90), ("P3", 90), ("P4", 50)):
            body = post(api, player, "M1", points, played)
            assert board_status(body, board) == "accepted"
        assert api.get(f"/v1/boards/{board}/awards").json()["error"] == (
            "awards_not_found"
        )
        with pytest.raises(SeasonError, match="closes at"):
            close_season(cfg, "S9", spark=spark)

        # After the end, within the lateness: still counts.
        wait_until(end)
        body = post(api, "P5", "M1", 95, played)
        assert board_status(body, board) == "accepted"

        # After end + lateness: held for review on the season, applied elsewhere.
        wait_until(end + timedelta(seconds=3))
        late_new = post(api, "P6", "M1", 500, played)
        assert board_status(late_new, board) == "late-review"
        assert late_new["status"] == "accepted"  # its other boards apply
        late_fix = post(
            api,
            "P2",
            "M1",
            200,
            played,
            sourceRevision=2,
            kind="correction",
            reason="server recount",
            eventId="P2-fix",
        )
        assert board_status(late_fix, board) == "late-review"
        assert board_status(late_fix, "alltime:all:global") == "accepted"
        states = {b["board"]: b for b in api.get("/v1/boards").json()["boards"]}
        assert states[board]["state"] == "closing"
        assert states[board]["closesAt"] == iso(end + timedelta(seconds=3))[:23] + "Z"

        snapshot = close_season(cfg, "S9", spark=spark)
        assert snapshot.version == 1
        # The award equals an offline sort of the events accepted before the cutoff.
        expected = {"P1": 100, "P2": 90, "P3": 90, "P4": 50, "P5": 95}
        v1 = read_version(cfg.data_dir, "S9", 1)
        assert v1 is not None
        table = v1.board(board)
        assert table is not None
        got = list(
            zip(
                table.column("position").to_pylist(),
                table.column("rank").to_pylist(),
                table.column("player_id").to_pylist(),
                table.column("score").to_pylist(),
                strict=True,
            )
        )
        assert got == oracle_ranking(expected)
        assert table.column("tier").to_pylist() == [
            "champion",
            "podium",
            None,
            None,
            None,
        ]
        # Closing again: the same snapshot.
        again = close_season(cfg, "S9", spark=spark)
        assert (again.version, again.hash) == (1, snapshot.hash)

        # The DAG's check (jobs.season_ops.verify_awards) reads the served award
        # through the API's read service without HTTP: it agrees, and names a
        # served entry planted wrong.
        with served_reads(cfg) as served:
            honest = verify_awards(cfg, "S9", served, spark=spark)
            assert honest["divergences"] == [], honest
            assert honest["checked"] == 10  # 5 players on the global and eu boards
            planted = verify_awards(cfg, "S9", PlantedAward(served, board), spark)
        assert planted["divergences"] == [
            f"{board} award entry 1: served (1, 'P1', 101, 'champion') "
            "offline (1, 'P1', 100, 'champion')"
        ]

        awards = api.get(f"/v1/boards/{board}/awards", params={"limit": 2}).json()
        assert awards["version"] == 1 and awards["hash"] == snapshot.hash
        assert awards["generation"] == snapshot.generation
        assert [e["playerId"] for e in awards["entries"]] == ["P1", "P5"]
        page2 = api.get(
            f"/v1/boards/{board}/awards",
            params={"cursor": awards["cursors"]["after"], "limit": 2},
        ).json()
        assert [(e["rank"], e["playerId"]) for e in page2["entries"]] == [
            (3, "P2"),
            (3, "P3"),
        ]
        states = {b["board"]: b for b in api.get("/v1/boards").json()["boards"]}
        assert states[board]["state"] == "closed"

        # Closed windows left Redis; reads come from the final generation.
        for partition in range(cfg.partitions):
            assert not redis_client.exists(Keys(partition).totals(board))
            assert not redis_client.exists(Keys(partition).fenwick(board))
        rank = api.get(f"/v1/boards/{board}/players/P5").json()
        assert (rank["rank"], rank["score"], rank["basis"]) == (2, 95, "snapshot")

        # Late review lists both late events; a game-server key gets 403.
        assert api.client.get("/v1/admin/seasons/S9/late-review").status_code == 401
        game = {"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", b"")}
        forbidden = api.client.get("/v1/admin/seasons/S9/late-review", headers=game)
        assert forbidden.status_code == 403
        late = admin_get(api, "/v1/admin/seasons/S9/late-review").json()["events"]
        assert sorted((e["eventId"], e["points"]) for e in late) == [
            ("P2-fix", 200),
            ("P6-M1", 500),
        ]

        v1_files = dir_digest(season_dir(cfg.data_dir, "S9") / "v1")
        admin = SignedClient(client, "admin", ADMIN_SECRET)
        unknown = admin.post(
            "/v1/admin/seasons/S9/adjudications",
            {"accept": ["nope"], "reason": "x"},
        )
        assert unknown.status_code == 422
        reply = admin.post(
            "/v1/admin/seasons/S9/adjudications",
            {"accept": ["P2-fix"], "reject": ["P6-M1"], "reason": "recount verified"},
        )
        assert reply.status_code == 200, reply.text
        result = reply.json()
        assert result["version"] == 2
        moved = {
            (c["board"], c["playerId"]): (c["oldRank"], c["newRank"], c["newTier"])
            for c in result["changes"]
        }
        assert moved[(board, "P2")] == (3, 1, "champion")
        assert moved[(board, "P1")] == (1, 2, "podium")
        assert (board, "P6") not in moved
        # Version 1 is byte-identical; both versions stay readable.
        assert dir_digest(season_dir(cfg.data_dir, "S9") / "v1") == v1_files
        first = api.get(f"/v1/boards/{board}/awards", params={"version": 1}).json()
        latest = api.get(f"/v1/boards/{board}/awards").json()
        assert first["entries"][0]["playerId"] == "P1"
        assert latest["version"] == 2
        assert [(e["playerId"], e["score"]) for e in latest["entries"][:2]] == [
            ("P2", 200),
            ("P1", 100),
        ]
        # Decided events leave the queue.
        assert admin_get(api, "/v1/admin/seasons/S9/late-review").json() == {
            "events": []
        }

    # The adjudication is audited in Delta; version 2 reaches gold_awards.
    land_audit(cfg, spark, redis_client)
    audit = (
        spark.read.format("delta")
        .load(str(audit_path(cfg)))
        .where("action = 'adjudication'")
        .collect()
    )
    assert [(r["actor"], r["subject"], r["reason"]) for r in audit] == [
        ("admin", "season:S9", "recount verified")
    ]
    from jobs.season import land_awards

    land_awards(cfg, spark)
    rows = spark.read.format("delta").load(str(cfg.delta_dir / GOLD_AWARDS))
    assert sorted(r[0] for r in rows.select("version").distinct().collect()) == [1, 2]


def test_close_crash_then_rerun_gives_one_whole_snapshot(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    end = datetime.now(UTC) + timedelta(seconds=1)
    cfg = season_settings(settings, tmp_path, end)
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        for i in range(12):
            post(api, f"P{i:02d}", "M1", 10 * (i % 5), end - timedelta(minutes=5))
    wait_until(end + timedelta(seconds=3))
    for hook in ("after_publish", "before_rename"):
        # A crash at either step: the exception the step raises, no version.
        with pytest.raises((SeasonError, AwardsError)):
            close_season(cfg, "S9", spark=spark, fail_at=hook)
        assert read_version(cfg.data_dir, "S9") is None
    snapshot = close_season(cfg, "S9", spark=spark)
    names = sorted(p.name for p in season_dir(cfg.data_dir, "S9").iterdir())
    assert names == ["v1"]
    again = close_season(cfg, "S9", spark=spark)
    assert again.hash == snapshot.hash
    v1 = read_version(cfg.data_dir, "S9", 1)
    assert v1 is not None
    table = v1.board("season:S9:global")
    assert isinstance(table, pa.Table) and table.num_rows == 12
    rows = spark.read.format("delta").load(str(cfg.delta_dir / GOLD_AWARDS))
    assert rows.where("board = 'season:S9:global'").count() == 12


def test_late_events_after_the_close_leave_the_closed_board_out_of_redis(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    from jobs.publish import run_publish
    from speed.rebase import rebase_published

    end = datetime.now(UTC) + timedelta(seconds=1)
    cfg = season_settings(settings, tmp_path, end)
    board = "season:S9:global"
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        post(api, "P1", "M1", 10, end - timedelta(minutes=5))
        wait_until(end + timedelta(seconds=3))
        close_season(cfg, "S9", spark=spark)
        # Held for review after the final generation: in the log tail of the next
        # rebase, on a board that has left Redis.
        late = post(api, "P2", "M1", 99, end - timedelta(minutes=5))
        assert board_status(late, board) == "late-review"
        generation = run_publish(cfg, spark=spark)
        report = rebase_published(cfg, generation)
        assert set(report.partitions.values()) == {"ok"}
        for partition in range(cfg.partitions):
            keys = Keys(partition)
            for name in (keys.totals(board), keys.fenwick(board), keys.buckets(board)):
                assert not redis_client.exists(name)
        top = api.get(f"/v1/boards/{board}/top").json()
        assert [(e["playerId"], e["score"]) for e in top["entries"]] == [("P1", 10)]
        assert top["basis"] == "snapshot"
