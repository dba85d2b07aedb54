"""LB_KEY_RATE_LIMIT: a token bucket per signing key for new matches (issue 23: one
key created 1,000 new players unthrottled), with LB_RATE_LIMIT's accounting:
redeliveries and corrections of a stored match spend nothing."""

from __future__ import annotations

from collections import Counter

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from api.main import create_app
from conf.settings import Settings
from tests.conftest import BACKENDS, SignedClient, event

pytestmark = pytest.mark.integration
KEYS = "dev:dev-secret,other:other-secret"


def _limited(settings: Settings, limit: str) -> Settings:
    limited = settings.model_copy(update={"key_rate_limit": limit, "hmac_keys": KEYS})
    for cached in ("key_rate_limit_bucket", "signing_keys"):
        limited.__dict__.pop(cached, None)
    return limited


def _new(n: int, prefix: str = "N") -> dict[str, object]:
    return event(eventId=f"{prefix}{n}", playerId=f"{prefix}{n}", matchId=f"m{n}")


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_one_key_cannot_create_players_unthrottled(settings: Settings) -> None:
    # 8 per key, split over the 4 partitions: 2 each, then one every 40 minutes.
    with TestClient(create_app(_limited(settings, "8/600"))) as client:
        api = SignedClient(client)
        replies = [api.post("/v1/score-events", _new(n)) for n in range(100)]
        statuses = Counter(r.status_code for r in replies)
        assert statuses == {200: 8, 429: 92}, statuses
        refused = next(r for r in replies if r.status_code == 429)
        assert refused.json()["error"] == "rate_limited"
        assert int(refused.headers["Retry-After"]) > 0
        accepted = [n for n, r in enumerate(replies) if r.status_code == 200]
        # Redeliveries and corrections of stored matches are not counted.
        for n in accepted:
            again = api.post("/v1/score-events", _new(n))
            assert again.status_code == 200 and again.json()["status"] == "duplicate"
            fixed = _new(n) | {
                "eventId": f"fix{n}",
                "sourceRevision": 2,
                "kind": "correction",
                "reason": "typo",
                "result": {"points": 31},
            }
            assert api.post("/v1/score-events", fixed).status_code == 200
        # Batches count the same way.
        batch = api.post(
            "/v1/score-events:batch", {"events": [_new(200), _new(201)]}
        ).json()["results"]
        assert [r.get("error") for r in batch] == ["rate_limited", "rate_limited"]
        # Another key has its own bucket.
        other = SignedClient(client, key_id="other", secret=b"other-secret")
        assert other.post("/v1/score-events", _new(0, "O")).status_code == 200


def test_the_key_limit_is_off_by_default(api: SignedClient) -> None:
    statuses = Counter(
        api.post("/v1/score-events", _new(n)).status_code for n in range(40)
    )
    assert statuses == {200: 40}


@pytest.mark.unit
def test_a_bad_key_limit_is_named() -> None:
    with pytest.raises(ValidationError, match="LB_KEY_RATE_LIMIT"):
        Settings(key_rate_limit="many")
    assert Settings(key_rate_limit="1000/0.01").key_rate_limit_bucket == (1000, 0.01)
    assert Settings().key_rate_limit_bucket is None


def test_a_fast_refill_lets_a_fleet_through(settings: Settings) -> None:
    # Sub-millisecond refills per partition (a fleet's rate) are kept, not rounded.
    with TestClient(create_app(_limited(settings, "4/0.0001"))) as client:
        api = SignedClient(client)
        statuses = Counter(
            api.post("/v1/score-events", _new(n)).status_code for n in range(60)
        )
        assert statuses == {200: 60}, statuses
