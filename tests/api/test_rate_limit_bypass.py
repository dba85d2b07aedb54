"""A "correction" of a match never seen is a new match: it spends a token (issue 7,
item 6; API.md LB_RATE_LIMIT)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration


def _correction(n: int, **overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "eventId": f"C{n}",
        "matchId": f"MC{n}",
        "sourceRevision": 2,
        "kind": "correction",
        "reason": "made up",
    }
    return event(**{**fields, **overrides})


def test_corrections_of_unknown_matches_spend_tokens(settings: Settings) -> None:
    limited = settings.model_copy(update={"rate_limit": "2/600"})
    limited.__dict__.pop("rate_limit_bucket", None)
    with TestClient(create_app(limited)) as client:
        api = SignedClient(client)
        statuses = [
            api.post("/v1/score-events", _correction(n)).status_code for n in range(10)
        ]
        assert statuses == [200, 200] + [429] * 8
        # A correction of a match that exists still costs nothing.
        real = _correction(0, eventId="C0b", sourceRevision=3)
        assert api.post("/v1/score-events", real).status_code == 200
        batch = api.post(
            "/v1/score-events:batch", {"events": [_correction(20), _correction(21)]}
        ).json()["results"]
        assert [r.get("error") for r in batch] == ["rate_limited", "rate_limited"]
