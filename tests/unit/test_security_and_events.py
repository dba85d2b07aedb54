"""HMAC signatures, event normalization and partitioning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.errors import Unauthorized
from api.security import sign, verify
from speed.events import EventInvalid, ScoreEventIn, normalize, parse_rfc3339
from speed.partitions import Keys, partition_of

pytestmark = pytest.mark.unit
KEYS = {"k1": b"secret-1", "k2": b"secret-2"}


def test_signature_round_trip_and_rotation() -> None:
    body = b'{"a":1}'
    assert (
        verify(KEYS, "k1", sign(b"secret-1", body, 1000), body, 300, now=1000) == "k1"
    )
    assert (
        verify(KEYS, "k2", sign(b"secret-2", body, 1000), body, 300, now=1299) == "k2"
    )
    with pytest.raises(Unauthorized):
        verify(KEYS, "k1", sign(b"secret-2", body, 1000), body, 300, now=1000)
    with pytest.raises(Unauthorized, match="window"):
        verify(KEYS, "k1", sign(b"secret-1", body, 1000), body, 300, now=1301)
    with pytest.raises(Unauthorized):
        verify(KEYS, "k1", "t=abc,v1=00", body, 300, now=1000)


def _event(**overrides: object) -> ScoreEventIn:
    raw = {
        "eventId": "E",
        "playerId": "P",
        "matchId": "M",
        "sourceRevision": 1,
        "occurredAt": "2026-11-20T10:00:00Z",
        "region": "eu",
        "result": {"points": 3},
    }
    raw.update(overrides)
    return ScoreEventIn.model_validate(raw)


def _normalize(event: ScoreEventIn) -> object:
    return normalize(
        event,
        regions=["eu"],
        now=datetime(2026, 11, 30, tzinfo=UTC),
        max_future=timedelta(minutes=5),
    )


def test_equivalent_timestamps_have_one_fingerprint() -> None:
    a = _normalize(_event(occurredAt="2026-11-20T10:00:00Z"))
    b = _normalize(_event(occurredAt="2026-11-20T11:00:00+01:00"))
    c = _normalize(_event(occurredAt="2026-11-20T10:00:00.000000001Z"))
    assert a.fingerprint == b.fingerprint  # type: ignore[attr-defined]
    assert a.fingerprint == c.fingerprint  # type: ignore[attr-defined]
    d = _normalize(_event(result={"points": 4}))
    assert a.fingerprint != d.fingerprint  # type: ignore[attr-defined]


def test_rfc3339_parsing() -> None:
    assert parse_rfc3339("2026-11-20t10:00:00z") == datetime(
        2026, 11, 20, 10, tzinfo=UTC
    )
    for bad in (
        "2026-11-20",
        "2026-11-20T10:00:00",
        "1700000000",
        "2026-13-01T00:00:00Z",
    ):
        with pytest.raises(ValueError):
            parse_rfc3339(bad)


def test_future_limit() -> None:
    with pytest.raises(EventInvalid, match="future"):
        _normalize(_event(occurredAt="2026-11-30T00:05:01Z"))
    _normalize(_event(occurredAt="2026-11-30T00:05:00Z"))


def test_partition_is_stable_and_keys_are_tagged() -> None:
    # crc32("P2") is fixed forever: changing the hash would move every player.
    assert [partition_of(p, 8) for p in ("P1", "P2", "P3", "P4")] == [1, 3, 5, 6]
    keys = Keys(3)
    for name in (
        keys.log,
        keys.position,
        keys.totals("alltime:all:global"),
        keys.dedupe_bucket(9, 1),
        keys.contribution_bucket(9, 1),
    ):
        assert name.startswith("lb:{p3}:")
