"""Scoring rules and plausibility bounds through the API, against a real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from speed.partitions import Keys, partition_of
from speed.records import decode_contribution, find_record
from tests.conftest import SignedClient
from tests.support.rules import BOARDS_V2, match

pytestmark = pytest.mark.integration


def _client(settings: Settings, tmp_path: Path, window_rule: str) -> TestClient:
    path = tmp_path / f"boards-{window_rule}.yaml"
    path.write_text(BOARDS_V2.format(window_rule=window_rule))
    return TestClient(create_app(settings.model_copy(update={"boards_file": path})))


@pytest.fixture
def v2api(settings: Settings, tmp_path: Path) -> Iterator[SignedClient]:
    with _client(settings, tmp_path, "v2") as client:
        yield SignedClient(client)


def totals(body: dict[str, Any]) -> dict[str, int]:
    """Totals of the boards the event was applied to (closed daily and weekly
    windows of past dates hold it for review instead)."""
    return {b["board"]: b["total"] for b in body["boards"] if "status" not in b}


def implausible_count(api: SignedClient, bound: str) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(f'lb_implausible_events_total{{bound="{bound}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_v2_points_come_from_the_record(
    v2api: SignedClient, redis_client: redis.Redis, settings: Settings
) -> None:
    reply = v2api.post("/v1/score-events", match(1, "2026-11-20T10:00:00Z"))
    assert reply.status_code == 200, reply.text
    # 100 (1st place) + 3 kills * 10 + 900 s // 60 = 145 on every board.
    assert set(totals(reply.json()).values()) == {145}
    # The log record keeps the record and its points per rule version.
    log = redis_client.xrange(Keys(partition_of("P2", 4)).log)
    record = orjson.loads(log[-1][1][b"r"])
    assert record["event"]["scores"] == {"v2": 145}
    assert record["event"]["placement"] == 1
    # The contribution record names the rule of each board.
    raw = find_record(
        redis_client, Keys(partition_of("P2", 4)), "contribution", "P2", "M1"
    )
    assert raw is not None
    contribution = decode_contribution(raw)
    # (as the record's "u", or as u:<board> where a board's rule differs).
    rule = contribution.get("u:season:S4:global", contribution["u"])
    assert rule == "v2"
    boards = {b["board"]: b for b in v2api.get("/v1/boards").json()["boards"]}
    assert boards["season:S4:global"]["rule"] == "v2"


def test_season_and_windows_under_different_rules(
    settings: Settings, tmp_path: Path
) -> None:
    with _client(settings, tmp_path, "v1") as client:
        api = SignedClient(client)
        body = match(1, "2026-11-20T10:00:00Z")
        body["result"]["points"] = 30
        got = totals(api.post("/v1/score-events", body).json())
        assert got["season:S4:eu"] == 145
        assert got["alltime:all:eu"] == 30
        # v1 boards need points: a record without them is refused, naming the field.
        refused = api.post("/v1/score-events", match(2, "2026-11-20T11:00:00Z"))
        assert refused.status_code == 422
        assert refused.json()["field"] == "result.points"
        listed = api.get("/v1/boards").json()["boards"]
        assert {b["board"]: b["rule"] for b in listed}["season:S4:eu"] == "v2"


def test_v2_field_bounds_are_invalid_request(v2api: SignedClient) -> None:
    reply = v2api.post(
        "/v1/score-events", match(1, "2026-11-20T10:00:00Z", placement=0)
    )
    assert reply.status_code == 422
    assert reply.json()["error"] == "invalid_request"
    assert reply.json()["field"] == "result.placement"


def test_points_per_match_bound(v2api: SignedClient) -> None:
    before = implausible_count(v2api, "max_points_per_match")
    reply = v2api.post("/v1/score-events", match(1, "2026-11-20T10:00:00Z", kills=35))
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"] == "implausible"
    assert "465" in reply.json()["detail"]
    assert implausible_count(v2api, "max_points_per_match") == before + 1
    # Nothing was applied.
    assert v2api.get("/v1/boards/season:S4:global/players/P2").status_code == 404
    batch = v2api.post(
        "/v1/score-events:batch",
        {"events": [match(2, "2026-11-20T10:00:00Z", kills=35)]},
    )
    assert batch.json()["results"][0]["error"] == "implausible"


def test_points_per_minute_since_previous_match(v2api: SignedClient) -> None:
    first = v2api.post("/v1/score-events", match(1, "2026-11-20T10:00:00Z"))
    assert first.status_code == 200
    before = implausible_count(v2api, "max_points_per_minute")
    # 145 points need 145 s of event time since the previous accepted match.
    early = v2api.post("/v1/score-events", match(2, "2026-11-20T10:02:24Z"))
    assert early.status_code == 422, early.text
    assert early.json()["error"] == "implausible"
    assert early.json()["detail"].startswith("max_points_per_minute")
    assert implausible_count(v2api, "max_points_per_minute") == before + 1
    rank = v2api.get("/v1/boards/season:S4:global/players/P2").json()
    assert rank["score"] == 145
    # Refused means nothing recorded: the same event is accepted once plausible
    # (here: as a different, later match).
    later = v2api.post("/v1/score-events", match(3, "2026-11-20T10:02:25Z"))
    assert later.status_code == 200, later.text
    assert totals(later.json())["season:S4:global"] == 290
    # Corrections of an accepted match are not new matches: no gap needed.
    fix = match(4, "2026-11-20T10:02:25Z", kind="correction", reason="recount")
    fix["matchId"], fix["sourceRevision"] = "M3", 2
    assert v2api.post("/v1/score-events", fix).status_code == 200


def test_matches_per_hour(v2api: SignedClient) -> None:
    # 1-point matches (21st place, no kills, one minute) two minutes apart.
    for n in range(20):
        at = f"2026-11-20T10:{2 * n:02d}:00Z"
        reply = v2api.post("/v1/score-events", match(n, at, placement=21, kills=0))
        assert reply.status_code == 200, reply.text
    extra = v2api.post(
        "/v1/score-events", match(20, "2026-11-20T10:40:00Z", placement=21, kills=0)
    )
    assert extra.status_code == 422
    assert extra.json()["detail"].startswith("max_matches_per_hour")
    # An hour after the first match, one has dropped out of the window.
    ok = v2api.post(
        "/v1/score-events", match(21, "2026-11-20T11:00:00Z", placement=21, kills=0)
    )
    assert ok.status_code == 200, ok.text
