"""Corrections are audited (who, when, what, why) through the shared audit stream."""

from __future__ import annotations

import orjson
import pytest
import redis

from speed.audit import AUDIT_STREAM
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration


def fix(event_id: str, revision: int, points: int, reason: str) -> dict[str, object]:
    return event(
        eventId=event_id,
        sourceRevision=revision,
        kind="correction",
        reason=reason,
        result={"points": points},
    )


def test_corrections_are_audited(api: SignedClient, redis_client: redis.Redis) -> None:
    assert api.post("/v1/score-events", event()).json()["status"] == "accepted"
    assert (
        api.post("/v1/score-events", fix("C1", 2, 5, "scoring bug")).status_code == 200
    )
    # Redelivered and superseded corrections change nothing: not audited again.
    api.post("/v1/score-events", fix("C1", 2, 5, "scoring bug"))
    api.post("/v1/score-events", fix("C0", 1, 50, "late resend"))
    batch = api.post(
        "/v1/score-events:batch", {"events": [fix("C2", 3, 7, "second look")]}
    )
    assert batch.json()["results"][0]["status"] == "accepted"
    audit = [orjson.loads(f[b"r"]) for _, f in redis_client.xrange(AUDIT_STREAM)]
    got = [
        (
            a["actor"],
            a["action"],
            a["subject"],
            a["reason"],
            a["details"]["sourceRevision"],
            a["details"]["totals"]["season:S4:global"],
        )
        for a in audit
    ]
    assert got == [
        ("dev", "correction", "C1", "scoring bug", 2, 5),
        ("dev", "correction", "C2", "second look", 3, 7),
    ]
