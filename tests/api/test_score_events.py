"""Writes over HTTP against a real redis-server: the seed scenario and every error."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from api.security import sign
from serving.log_records import logged_result
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration


def seed(api: SignedClient) -> None:
    """P1 920, P2 900, P3 900, P4 880 on season S4 (one match each)."""
    for player, points in (("P1", 920), ("P2", 900), ("P3", 900), ("P4", 880)):
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"seed-{player}",
                playerId=player,
                matchId=f"seed-{player}",
                result={"points": points},
            ),
        )
        assert reply.status_code == 200, reply.text


def season_total(body: dict[str, Any]) -> int:
    (item,) = [b for b in body["boards"] if b["board"] == "season:S4:global"]
    return int(item["total"])


def test_seed_scenario(api: SignedClient) -> None:
    seed(api)
    first = api.post("/v1/score-events", event())
    assert first.status_code == 200
    body = first.json()
    assert body["status"] == "accepted"
    assert season_total(body) == 930
    boards = {b["board"] for b in body["boards"]}
    assert boards == {
        "season:S4:global",
        "season:S4:eu",
        "daily:2026-11-20:global",
        "daily:2026-11-20:eu",
        "weekly:2026-W47:global",
        "weekly:2026-W47:eu",
        "monthly:2026-11:global",
        "monthly:2026-11:eu",
        "alltime:all:global",
        "alltime:all:eu",
    }

    again = api.post("/v1/score-events", event())
    assert again.status_code == 200
    assert again.json() == {**body, "status": "duplicate"}

    conflict = api.post("/v1/score-events", event(result={"points": 31}))
    assert conflict.status_code == 409
    assert conflict.json()["error"] == "event_conflict"

    other_transport = api.post("/v1/score-events", event(eventId="E78"))
    assert other_transport.status_code == 200
    assert other_transport.json()["status"] == "superseded"
    assert season_total(other_transport.json()) == 930

    correction = api.post(
        "/v1/score-events",
        event(
            eventId="E79",
            sourceRevision=2,
            kind="correction",
            reason="scoring bug",
            result={"points": 5},
        ),
    )
    assert correction.status_code == 200
    assert correction.json()["status"] == "accepted"
    assert season_total(correction.json()) == 905

    older = api.post(
        "/v1/score-events",
        event(
            eventId="E80",
            sourceRevision=1,
            kind="correction",
            reason="late resend",
            result={"points": 50},
        ),
    )
    assert older.json()["status"] == "superseded"
    assert season_total(older.json()) == 905


def test_versions_count_changes_per_board(api: SignedClient) -> None:
    a = api.post("/v1/score-events", event()).json()
    b = api.post("/v1/score-events", event(eventId="E2", matchId="M2")).json()
    assert [x["version"] for x in a["boards"]] == [1] * len(a["boards"])
    assert [x["version"] for x in b["boards"]] == [2] * len(b["boards"])
    assert season_total(b) == 60


def test_correction_moving_match_to_another_day(api: SignedClient) -> None:
    api.post("/v1/score-events", event())
    moved = api.post(
        "/v1/score-events",
        event(
            eventId="E79",
            sourceRevision=2,
            kind="correction",
            reason="wrong clock",
            occurredAt="2026-11-21T10:00:00Z",
            result={"points": 40},
        ),
    ).json()
    by_board = {b["board"]: b["total"] for b in moved["boards"]}
    # The old day loses the contribution (the player stays on it with 0),
    # the new day gains it, and the season total moves by new - old.
    assert by_board["daily:2026-11-20:global"] == 0
    assert by_board["daily:2026-11-21:global"] == 40
    assert by_board["season:S4:global"] == 40


def test_late_event_is_recorded_not_applied_to_the_season(
    settings: Any, tmp_path: Any, redis_client: Any
) -> None:
    from fastapi.testclient import TestClient

    from api.main import create_app

    boards = tmp_path / "boards.yaml"
    boards.write_text(
        "regions: [eu, na]\n"
        "seasons:\n"
        "  - {id: S3, start: '2026-10-01T00:00:00Z', end: '2026-11-01T00:00:00Z',\n"
        "     allowedLateness: PT1H}\n"
    )
    closed = settings.model_copy(update={"boards_file": boards})
    with TestClient(create_app(closed)) as client:
        api = SignedClient(client)
        body = api.post(
            "/v1/score-events",
            event(eventId="L1", matchId="ML", occurredAt="2026-10-15T00:00:00Z"),
        ).json()
    # All-time and the other windows still accept it: the event is accepted, and
    # the closed season's boards say late-review, unchanged.
    assert body["status"] == "accepted"
    by_board = {b["board"]: b for b in body["boards"]}
    for scope in ("global", "eu"):
        item = by_board[f"season:S3:{scope}"]
        assert item["status"] == "late-review"
        assert item["total"] == 0
    assert by_board["alltime:all:global"]["total"] == 30
    assert "status" not in by_board["alltime:all:global"]
    # Recorded in the log with its per-board outcome, for the batch layer: one
    # array per board, nothing the record holds already, read back as the reply.
    (entry,) = redis_client.xrange(f"lb:{{p{body['partition']}}}:log")
    record = orjson.loads(entry[1][b"r"])
    assert set(record["result"]) == {"status", "items"}
    season = [i for i in record["result"]["items"] if i[0] == "season:S3:global"]
    assert season == [["season:S3:global", 0, 0, "late-review"]]
    reply = {k: v for k, v in body.items() if k in logged_result(record)}
    assert logged_result(record) == reply
    assert (
        redis_client.hget(f"lb:{{p{body['partition']}}}:tot:season:S3:global", "P2")
        is None
    )


def test_batch_results_in_order(api: SignedClient) -> None:
    events = [
        event(eventId="B1", matchId="MB1"),
        event(eventId="B1", matchId="MB1"),
        event(eventId="B1", matchId="MB1", result={"points": 1}),
        event(eventId="B2", matchId="MB1"),
        {"eventId": "bad"},
        event(eventId="B3", matchId="MB3", result={"points": 12}),
    ]
    reply = api.post("/v1/score-events:batch", {"events": events})
    assert reply.status_code == 200
    results = reply.json()["results"]
    assert [r.get("status") or r.get("error") for r in results] == [
        "accepted",
        "duplicate",
        "event_conflict",
        "superseded",
        "invalid_request",
        "accepted",
    ]
    assert season_total(results[5]) == 42


def test_concurrent_redelivery_is_applied_once(
    settings: Any, redis_client: Any
) -> None:
    import asyncio

    import httpx

    from api.main import create_app

    async def run() -> list[dict[str, Any]]:
        app = create_app(settings)
        body = orjson.dumps(event())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t"
            ) as client:

                async def send() -> dict[str, Any]:
                    reply = await client.post(
                        "/v1/score-events",
                        content=body,
                        headers={
                            "X-Key-Id": "dev",
                            "X-Signature": sign(b"dev-secret", body),
                        },
                    )
                    assert reply.status_code == 200
                    return reply.json()  # type: ignore[no-any-return]

                return await asyncio.gather(*(send() for _ in range(50)))

    replies = asyncio.run(run())
    statuses = sorted(r["status"] for r in replies)
    assert statuses.count("accepted") == 1
    assert statuses.count("duplicate") == 49
    assert {season_total(r) for r in replies} == {30}
    assert {r["position"] for r in replies} == {1}


def test_positions_are_gap_free_per_partition(
    api: SignedClient, redis_client: Any
) -> None:
    events = [
        event(eventId=f"G{i}", playerId=f"player-{i % 17}", matchId=f"M{i}")
        for i in range(200)
    ]
    results = api.post("/v1/score-events:batch", {"events": events}).json()["results"]
    by_partition: dict[int, list[int]] = {}
    for result in results:
        by_partition.setdefault(result["partition"], []).append(result["position"])
    for partition, positions in by_partition.items():
        assert positions == list(range(1, len(positions) + 1)), partition
        stream = redis_client.xrange(f"lb:{{p{partition}}}:log")
        logged = [int(entry_id.split(b"-")[0]) for entry_id, _ in stream]
        assert logged == positions


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"eventId": ""}, "eventId"),
        ({"eventId": "x" * 129}, "eventId"),
        ({"eventId": "é" * 65}, "eventId"),
        ({"playerId": "bad\nid"}, "playerId"),
        ({"matchId": 7}, "matchId"),
        ({"sourceRevision": 0}, "sourceRevision"),
        ({"sourceRevision": "2"}, "sourceRevision"),
        ({"sourceRevision": 1.5}, "sourceRevision"),
        ({"result": {"points": 1.5}}, "result.points"),
        ({"result": {"points": "10"}}, "result.points"),
        ({"result": {"points": 10**9}}, "result.points"),
        ({"result": {"points": -1}}, "result.points"),
        ({"result": {}}, "result.points"),
        ({"occurredAt": "yesterday"}, "occurredAt"),
        ({"occurredAt": "2026-11-20T10:00:00"}, "occurredAt"),
        ({"occurredAt": "2999-01-01T00:00:00Z"}, "occurredAt"),
        ({"kind": "correction", "reason": None}, "reason"),
        ({"kind": "bonus"}, "kind"),
        ({"region": "mars"}, "region"),
        ({"extra": 1}, "extra"),
    ],
)
def test_invalid_events_get_422_naming_the_field(
    api: SignedClient, overrides: dict[str, Any], field: str
) -> None:
    reply = api.post("/v1/score-events", event(**overrides))
    assert reply.status_code == 422, reply.text
    body = reply.json()
    assert body["error"] == "invalid_request"
    assert body["field"] == field, body


def test_missing_field_and_bad_json(api: SignedClient) -> None:
    payload = event()
    del payload["playerId"]
    missing = api.post("/v1/score-events", payload)
    assert missing.status_code == 422 and missing.json()["field"] == "playerId"
    body = b"{not json"
    bad = api.client.post(
        "/v1/score-events",
        content=body,
        headers={"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", body)},
    )
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_request"
    for payload in ([], "x", 3, None):
        reply = api.post("/v1/score-events", payload)
        assert reply.status_code == 422, payload


def test_batch_shape_errors(api: SignedClient) -> None:
    assert api.post("/v1/score-events:batch", {"events": []}).status_code == 422
    assert api.post("/v1/score-events:batch", {"evts": [event()]}).status_code == 422
    assert api.post("/v1/score-events:batch", [event()]).status_code == 422
    too_many = {"events": [event(eventId=f"e{i}") for i in range(1001)]}
    assert api.post("/v1/score-events:batch", too_many).status_code == 422


def test_body_limit_is_413(api: SignedClient) -> None:
    # 1000 events padded past the 2 MiB default limit.
    payload = {
        "events": [event(eventId=f"e{i}", reason="r" * 2200) for i in range(1000)]
    }
    reply = api.post("/v1/score-events:batch", payload)
    assert reply.status_code == 413
    assert reply.json()["error"] == "payload_too_large"
    # Without a Content-Length (chunked upload) the limit holds as well.
    body = orjson.dumps(payload)
    chunked = api.client.post(
        "/v1/score-events:batch",
        content=iter([body[i : i + 65536] for i in range(0, len(body), 65536)]),
        headers={"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", body)},
    )
    assert chunked.status_code == 413


def test_auth_failures_are_401(api: SignedClient) -> None:
    body = orjson.dumps(event())
    # Skews of 330 s, not 301: the cases are signed before any is sent, and on a
    # loaded machine a +301 s signature was inside the 300 s window seconds later.
    cases = [
        {},
        {"X-Key-Id": "dev"},
        {"X-Key-Id": "nobody", "X-Signature": sign(b"dev-secret", body)},
        {"X-Key-Id": "dev", "X-Signature": sign(b"wrong", body)},
        {
            "X-Key-Id": "dev",
            "X-Signature": sign(b"dev-secret", body, int(time.time()) - 330),
        },
        {
            "X-Key-Id": "dev",
            "X-Signature": sign(b"dev-secret", body, int(time.time()) + 330),
        },
        {"X-Key-Id": "dev", "X-Signature": "garbage"},
        {"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", body + b" ")},
    ]
    for headers in cases:
        reply = api.client.post("/v1/score-events", content=body, headers=headers)
        assert reply.status_code == 401, headers
        assert reply.json()["error"] == "unauthorized"
    # Nothing was applied by any of them.
    assert api.post("/v1/score-events", event()).json()["status"] == "accepted"


def test_key_rotation_accepts_every_configured_key(settings: Any) -> None:
    from fastapi.testclient import TestClient

    from api.main import create_app

    rotated = settings.model_copy(update={"hmac_keys": "old:s1,new:s2"})
    rotated.__dict__.pop("signing_keys", None)
    with TestClient(create_app(rotated)) as client:
        for key_id, secret in (("old", b"s1"), ("new", b"s2")):
            signed = SignedClient(client, key_id, secret)
            reply = signed.post(
                "/v1/score-events",
                event(eventId=f"rot-{key_id}", matchId=f"m-{key_id}"),
            )
            assert reply.status_code == 200, reply.text


def test_rate_limit_counts_new_matches_only(settings: Any) -> None:
    from fastapi.testclient import TestClient

    from api.main import create_app

    limited = settings.model_copy(update={"rate_limit": "2/60"})
    limited.__dict__.pop("rate_limit_bucket", None)
    with TestClient(create_app(limited)) as client:
        api = SignedClient(client)
        assert (
            api.post("/v1/score-events", event(eventId="a", matchId="m1")).status_code
            == 200
        )
        assert (
            api.post("/v1/score-events", event(eventId="b", matchId="m2")).status_code
            == 200
        )
        # Redelivery and correction do not spend tokens.
        assert (
            api.post("/v1/score-events", event(eventId="a", matchId="m1")).status_code
            == 200
        )
        fix = event(
            eventId="c", matchId="m1", sourceRevision=2, kind="correction", reason="r"
        )
        assert api.post("/v1/score-events", fix).status_code == 200
        third = api.post("/v1/score-events", event(eventId="d", matchId="m3"))
        assert third.status_code == 429
        assert int(third.headers["Retry-After"]) >= 1
        assert third.json()["error"] == "rate_limited"
        # The rejected event left nothing behind: it is accepted once tokens return.
        other_player = event(eventId="d", playerId="P9", matchId="m3")
        assert api.post("/v1/score-events", other_player).status_code == 200


def test_health_and_docs(api: SignedClient) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").status_code == 200
    assert "lb_http_requests_total" in api.get("/metrics").text
    assert api.get("/openapi.json").status_code == 200
    assert api.get("/nope").status_code == 404
