"""Quarantine: thresholds published with a generation, held events invisible in every
public answer, released once as of their acceptance (live and batch agree), rejected
ones never applied; decisions audited."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import redis
from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from api.main import create_app
from conf.settings import Settings
from jobs.audit import audit_path
from jobs.publish import run_publish
from speed.audit import AUDIT_STREAM
from speed.rebase import rebase_published
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SNAP = {"mode": "snapshot"}


def publish(settings: Settings, spark: SparkSession) -> str:
    generation = run_publish(settings, spark=spark, bucket_target=3)
    assert set(rebase_published(settings, generation).partitions.values()) == {"ok"}
    return generation


def admin(api: SignedClient) -> SignedClient:
    return SignedClient(api.client, "admin", b"dev-admin-secret")


def decide(api: SignedClient, event_id: str, action: str) -> Any:
    return admin(api).post(
        f"/v1/admin/quarantine/{event_id}", {"action": action, "reason": "checked"}
    )


def held(api: SignedClient) -> list[dict[str, Any]]:
    signed = admin(api)
    from api.security import sign

    headers = {"X-Key-Id": "admin", "X-Signature": sign(signed.secret, b"")}
    reply = api.client.get("/v1/admin/quarantine", headers=headers)
    assert reply.status_code == 200, reply.text
    return reply.json()["events"]


def scores(api: SignedClient, params: dict[str, str] | None = None) -> dict[str, int]:
    top = api.get(f"/v1/boards/{BOARD}/top", params=params or {}).json()
    return {e["playerId"]: e["score"] for e in top["entries"]}


def post(api: SignedClient, n: str, player: str, points: int, **kw: Any) -> Any:
    body = event(
        eventId=n,
        playerId=player,
        matchId=kw.pop("match", n),
        result={"points": points},
        **kw,
    )
    reply = api.post("/v1/score-events", body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_quarantine_hold_release_reject(
    spark: SparkSession, settings: Settings, redis_client: redis.Redis
) -> None:
    config = settings.model_copy(
        update={"quarantine_quantile": 0.9, "quarantine_min_samples": 5}
    )
    with TestClient(create_app(config)) as client:
        api = SignedClient(client)
        for i in range(12):
            post(api, f"s{i}", f"P{i}", 10 * (i + 1))
        g1 = publish(config, spark)
        manifest = json.loads((config.segments_dir / g1 / "manifest.json").read_text())
        threshold = manifest["quarantine"][BOARD]["eu"]
        assert 100 <= threshold <= 120  # p90 of 10, 20, ..., 120
        before = scores(api)

        # Above the threshold: held, recorded, applied nowhere.
        big = post(api, "big", "P3", 5000)
        assert big["status"] == "quarantined"
        assert big["boards"] == []  # applied to no board
        assert post(api, "big", "P3", 5000)["status"] == "duplicate"
        assert post(api, "big2", "P3", 5000, match="big")["status"] == "superseded"
        assert scores(api) == before
        me = api.get(f"/v1/boards/{BOARD}/players/P3").json()
        assert (me["score"], me["population"]) == (40, 12)
        approx = api.get(f"/v1/boards/{BOARD}/players/P3", params={"mode": "approx"})
        assert approx.json()["score"] == 40
        (listed,) = held(api)
        assert (listed["eventId"], listed["playerId"]) == ("big", "P3")
        assert listed["scores"] == {"v1": 5000}
        # A held match corrected below the threshold: the held revision is replaced.
        post(api, "odd", "P5", 900)
        post(
            api,
            "odd-fix",
            "P5",
            25,
            match="odd",
            sourceRevision=2,
            kind="correction",
            reason="recount",
        )
        assert len(held(api)) == 2
        publish(config, spark)
        assert scores(api, SNAP) == {**before, "P5": 85}

        # Release: applied once, as of its acceptance.
        released = decide(api, "big", "release")
        assert released.status_code == 200, released.text
        assert released.json()["result"]["status"] == "accepted"
        assert decide(api, "big", "release").status_code == 404
        assert scores(api)["P3"] == 5040
        superseded = decide(api, "odd", "release")
        assert superseded.json()["result"]["status"] == "superseded"
        assert held(api) == []

        # Reject: recorded, never applied. (Published by the same generation as the
        # releases: one publish fewer; P7's 80 is part of ``before``.)
        assert post(api, "big3", "P7", 7000)["status"] == "quarantined"
        rejected = decide(api, "big3", "reject")
        assert rejected.json()["result"]["status"] == "rejected"
        assert decide(api, "big3", "release").status_code == 404
        assert held(api) == []
        publish(config, spark)
        assert before["P7"] == 80
        assert scores(api, SNAP) == {**before, "P3": 5040, "P5": 85}
        assert scores(api) == scores(api, SNAP)
        assert scores(api, SNAP)["P7"] == 80
        assert scores(api)["P7"] == 80
        bad = admin(api).post(
            "/v1/admin/quarantine/x", {"action": "keep", "reason": "r"}
        )
        assert bad.status_code == 422
        game = api.post(
            "/v1/admin/quarantine/big3", {"action": "reject", "reason": "r"}
        )
        assert game.status_code == 403

    # Every publish landed the audit stream into gold_audit (and trimmed it).
    assert redis_client.xlen(AUDIT_STREAM) == 0
    audit = (
        spark.read.format("delta")
        .load(str(audit_path(config)))
        .orderBy("audit_key")
        .collect()
    )
    decisions = [
        (
            a["action"],
            a["subject"],
            orjson.loads(a["details"])["playerId"],
            orjson.loads(a["details"])["outcome"],
        )
        for a in audit
        if a["action"].startswith("quarantine.")
    ]
    assert decisions == [
        ("quarantine.release", "big", "P3", "accepted"),
        ("quarantine.release", "odd", "P5", "superseded"),
        ("quarantine.reject", "big3", "P7", "rejected"),
    ]
