"""No input answers 5xx: occurredAt bounds, the dedupe window and the id alphabet
(issue 7, items 3, 7 and 8)."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration

OVERFLOWING = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+00:01"]


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("stamp", OVERFLOWING)
def test_out_of_range_offsets_are_422(api: SignedClient, stamp: str) -> None:
    reply = api.post("/v1/score-events", event(occurredAt=stamp))
    assert reply.status_code == 422, reply.text
    assert reply.json()["field"] == "occurredAt"


def test_a_bad_timestamp_fails_only_its_own_event_in_a_batch(
    api: SignedClient,
) -> None:
    events = [
        event(eventId="B1", matchId="MB1"),
        event(eventId="B2", matchId="MB2", occurredAt=OVERFLOWING[0]),
        event(eventId="B3", matchId="MB3", occurredAt=OVERFLOWING[1]),
        event(eventId="B4", matchId="MB4", occurredAt="2026-02-30T00:00:00Z"),
        event(eventId="B5", matchId="MB5"),
    ]
    reply = api.post("/v1/score-events:batch", {"events": events})
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert [r.get("status") for r in results] == [
        "accepted",
        None,
        None,
        None,
        "accepted",
    ]
    assert all(results[i]["error"] == "invalid_request" for i in (1, 2, 3))
    assert results[4]["boards"][0]["total"] == 60


def test_dedupe_window_refuses_old_events_as_too_old(settings: Settings) -> None:
    now = datetime.now(UTC)
    windowed = settings.model_copy(update={"dedupe_window": timedelta(days=30)})
    with TestClient(create_app(windowed)) as client:
        api = SignedClient(client)
        old = api.post(
            "/v1/score-events", event(occurredAt=_iso(now - timedelta(days=31)))
        )
        assert old.status_code == 422, old.text
        assert old.json()["error"] == "too_old"
        assert old.json()["field"] == "occurredAt"
        future = api.post(
            "/v1/score-events",
            event(eventId="F1", occurredAt=_iso(now + timedelta(seconds=400))),
        )
        assert future.status_code == 422 and future.json()["field"] == "occurredAt"
        inside = api.post(
            "/v1/score-events",
            event(eventId="I1", occurredAt=_iso(now - timedelta(days=29))),
        )
        assert inside.status_code == 200, inside.text
        # Year 1 with an offset inside the range: refused as too old, never 5xx.
        ancient = api.post(
            "/v1/score-events", event(eventId="A1", occurredAt="0001-01-01T00:00:00Z")
        )
        assert ancient.status_code == 422 and ancient.json()["error"] == "too_old"


def test_dedupe_window_is_an_iso_duration() -> None:
    assert Settings(dedupe_window="P30D").dedupe_window == timedelta(days=30)
    assert Settings().dedupe_window == timedelta(days=30)
    assert Settings(dedupe_window="PT90M").dedupe_window == timedelta(minutes=90)
    with pytest.raises(ValueError):
        Settings(dedupe_window="PT0S")
    # Records outlive the window, so a redelivery inside it finds its record.
    long = Settings(dedupe_window="P400D")
    assert long.record_ttl_seconds > 400 * 86400


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("playerId", "a/b"),
        ("playerId", "a b"),
        ("playerId", "x" * 65),
        ("playerId", "emoji\U0001f600"),
        ("playerId", "semi;colon"),
        ("playerId", "\u0301leading-mark"),
        ("eventId", "E%2F"),
        ("eventId", "tab\tid"),
        ("matchId", "M?1"),
        ("matchId", "M#1"),
    ],
)
def test_ids_outside_the_alphabet_are_422(
    api: SignedClient, field: str, value: str
) -> None:
    reply = api.post("/v1/score-events", event(**{field: value}))
    assert reply.status_code == 422, reply.text
    body = reply.json()
    assert body["error"] == "invalid_request" and body["field"] == field


def test_ids_in_the_alphabet_round_trip(api: SignedClient) -> None:
    for player in ("x" * 64, "Zoë_1.eu:main-2", "名前", "नमस्ते"):
        reply = api.post(
            "/v1/score-events", event(playerId=player, eventId="E-" + player[:8])
        )
        assert reply.status_code == 200, (player, reply.text)
        assert reply.json()["playerId"] == player
        read = api.get(f"/v1/boards/season:S4:global/players/{player}")
        assert read.status_code == 200, (player, read.text)
        assert read.json()["score"] == 30


def test_composed_and_decomposed_ids_are_one_player(api: SignedClient) -> None:
    composed = unicodedata.normalize("NFC", "José")
    decomposed = unicodedata.normalize("NFD", "José")
    assert composed != decomposed
    first = api.post(
        "/v1/score-events", event(playerId=composed, eventId="J1", matchId="MJ1")
    )
    second = api.post(
        "/v1/score-events", event(playerId=decomposed, eventId="J2", matchId="MJ2")
    )
    assert first.status_code == second.status_code == 200
    assert second.json()["playerId"] == composed
    totals = {b["board"]: b["total"] for b in second.json()["boards"]}
    assert totals["season:S4:global"] == 60
    # The same event redelivered in the other form is a duplicate, not a new one.
    again = api.post(
        "/v1/score-events", event(playerId=decomposed, eventId="J1", matchId="MJ1")
    )
    assert again.json()["status"] == "duplicate"
    top = api.get("/v1/boards/season:S4:global/top").json()["entries"]
    assert [e["playerId"] for e in top] == [composed]
    # Reads normalize too: either form finds the one player.
    for form in (composed, decomposed):
        read = api.get(f"/v1/boards/season:S4:global/players/{form}")
        assert read.status_code == 200, read.text
        assert read.json()["playerId"] == composed and read.json()["score"] == 60
        near = api.get(f"/v1/boards/season:S4:global/players/{form}/nearby")
        assert near.status_code == 200, near.text
