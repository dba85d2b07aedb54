"""Records leave Redis once landed (issue 25 item 1): after a publish and the rebase
onto it, Redis holds no dedupe or contribution record of a landed event, and a
redelivery, a correction or a conflicting redelivery of it is answered from the
generation's landed records index (serving/landed.py) as before: exactly once,
generations later, after `lb rebuild` and after a Redis restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from jobs import spark as spark_module
from jobs.publish import run_publish
from jobs.rebuild import run_rebuild
from serving.landed import CONTRIBUTION, DEDUPE
from serving.registry import GenerationRegistry
from speed.connection import sync_client
from speed.partitions import partition_of
from speed.rebase import rebase_published
from speed.records import identity_key
from tests.conftest import SignedClient, event
from tests.support.rebuild import wipe_all_but_logs
from tests.support.redis_servers import own_server
from tests.support.settings import base_settings

pytestmark = pytest.mark.integration

ALLTIME = "alltime:all:global"


def post(api: SignedClient, **fields: Any) -> Any:
    return api.post("/v1/score-events", event(**fields))


def alltime(body: dict[str, Any]) -> int:
    return next(b["total"] for b in body["boards"] if b["board"] == ALLTIME)


def records_in_redis(client: redis.Redis) -> int:
    """Dedupe and contribution records Redis holds, every epoch."""
    return sum(
        int(client.hlen(key))
        for pattern in ("lb:*:rd:*", "lb:*:rc:*")
        for key in client.scan_iter(match=pattern)
    )


def publish_and_rebase(settings: Any, spark: Any, client: TestClient) -> str:
    generation = run_publish(settings, spark=spark)
    report = rebase_published(settings, generation)
    assert set(report.partitions.values()) == {"ok"}, report
    client.app.state.generations.refresh(force=True)  # type: ignore[attr-defined]
    return generation


def test_landed_records_answer_redeliveries_and_corrections(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The index reads the landed records in several ranges of log positions, as
    # it does for a large publish (one here would hold them all).
    monkeypatch.setattr(spark_module, "ROWS_PER_FETCH", 1)
    server = own_server(tmp_path / "redis")
    settings = base_settings(server.url, tmp_path)
    check = sync_client(server.url)
    try:
        with TestClient(create_app(settings)) as client:
            api = SignedClient(client)
            first = post(api, eventId="E0", playerId="P1", matchId="M0")
            assert first.status_code == 200, first.text
            points = first.json()["boards"][0]["total"]
            assert (
                post(api, eventId="E1", playerId="P2", matchId="M1").status_code == 200
            )
            second = post(
                api, eventId="E2", playerId="P1", matchId="M2", result={"points": 30}
            )
            assert alltime(second.json()) == points + 30
            assert records_in_redis(check) == 6

            g1 = publish_and_rebase(settings, spark, client)
            # Landed and rebased: no record of these events left in Redis; the
            # generation's index holds them.
            assert records_in_redis(check) == 0
            registry = GenerationRegistry(settings.segments_dir, 3)
            registry.refresh(force=True)
            index = registry.get(g1).landed()
            assert index is not None
            assert index.get(DEDUPE, *identity_key("P1", "E0")) is not None
            assert index.get(CONTRIBUTION, *identity_key("P1", "M0")) is not None

            # A redelivery: its saved result; a conflicting one: 409.
            again = post(api, eventId="E0", playerId="P1", matchId="M0")
            assert again.status_code == 200, again.text
            assert again.json()["status"] == "duplicate"
            assert again.json()["boards"] == first.json()["boards"]
            assert again.json()["position"] == first.json()["position"]
            other = post(
                api, eventId="E0", playerId="P1", matchId="M0", result={"points": 1}
            )
            assert other.status_code == 409, other.text
            # A correction of the landed match: new - stored, once.
            corrected = post(
                api,
                eventId="E9",
                playerId="P1",
                matchId="M0",
                sourceRevision=2,
                result={"points": 70},
                kind="correction",
                reason="recount",
            )
            assert corrected.json()["status"] == "accepted", corrected.text
            assert alltime(corrected.json()) == 70 + 30
            # Only the correction's records are in Redis (not yet landed).
            assert records_in_redis(check) == 2

            # Several generations later (a chain of index layers).
            publish_and_rebase(settings, spark, client)
            # A stale revision of the landed correction (E9, in g2's layer):
            # superseded. Sent before g3 so that g3 lands it too: the rebuild
            # below then starts with nothing unlanded, without a fourth publish
            # (one Spark publish fewer; lookups through the whole chain are the
            # redeliveries' after g3).
            stale = post(
                api,
                eventId="E10",
                playerId="P1",
                matchId="M0",
                sourceRevision=1,
                result={"points": 5},
                kind="correction",
                reason="old",
            )
            assert stale.json()["status"] == "superseded"
            assert alltime(stale.json()) == 100
            post(api, eventId="E3", playerId="P3", matchId="M3")
            g3 = publish_and_rebase(settings, spark, client)
            manifest = orjson.loads(
                (settings.segments_dir / g3 / "manifest.json").read_bytes()
            )
            assert len(manifest["landed"]["layers"]) == 3
            assert records_in_redis(check) == 0
            again = post(api, eventId="E0", playerId="P1", matchId="M0")
            assert again.json()["status"] == "duplicate"
            assert again.json()["boards"] == first.json()["boards"]
            redelivered = post(
                api,
                eventId="E9",
                playerId="P1",
                matchId="M0",
                sourceRevision=2,
                result={"points": 70},
                kind="correction",
                reason="recount",
            )
            assert redelivered.json()["status"] == "duplicate"
            assert redelivered.json()["boards"] == corrected.json()["boards"]

            # `lb rebuild` after a wipe: the landed records stay in the index,
            # nothing of them comes back to Redis, answers are unchanged.
            intact = run_rebuild(settings, spark=spark, dry_run=True)
            assert intact.differences == [], [str(d) for d in intact.differences]
            wipe_all_but_logs(check)
            done = run_rebuild(settings, spark=spark)
            assert set(done.partitions.values()) == {"ok"}
            assert records_in_redis(check) == 0
            again = post(api, eventId="E0", playerId="P1", matchId="M0")
            assert again.json()["status"] == "duplicate"
            assert again.json()["boards"] == first.json()["boards"]
            other = post(
                api, eventId="E2", playerId="P1", matchId="M2", result={"points": 3}
            )
            assert other.status_code == 409
            corrected = post(
                api,
                eventId="E11",
                playerId="P1",
                matchId="M0",
                sourceRevision=3,
                result={"points": 10},
                kind="correction",
                reason="recount",
            )
            assert alltime(corrected.json()) == 10 + 30

            # A Redis restart (kill -9, AOF fsync always): the same answers.
            server.stop(kill=True)
            server.start()
            # The API's pooled connections died with the server: the first write
            # may answer 503 (outcome unknown, API.md), redelivered as the
            # contract says.
            again = post(api, eventId="E1", playerId="P2", matchId="M1")
            if again.status_code == 503:
                again = post(api, eventId="E1", playerId="P2", matchId="M1")
            assert again.status_code == 200, again.text
            assert again.json()["status"] == "duplicate"
            redelivered = post(
                api,
                eventId="E11",
                playerId="P1",
                matchId="M0",
                sourceRevision=3,
                result={"points": 10},
                kind="correction",
                reason="recount",
            )
            assert redelivered.json()["status"] == "duplicate"
            assert alltime(redelivered.json()) == 40
            corrected = post(
                api,
                eventId="E12",
                playerId="P1",
                matchId="M2",
                sourceRevision=2,
                result={"points": 0},
                kind="correction",
                reason="recount",
            )
            assert alltime(corrected.json()) == 10
            assert (
                partition_of("P1", settings.partitions) == corrected.json()["partition"]
            )
    finally:
        check.close()
        server.stop()
