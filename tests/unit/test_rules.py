"""Scoring rules: pure functions with a version, field bounds and plausibility."""

from __future__ import annotations

import pytest

from conf.rules import (
    Implausible,
    RuleInputError,
    default_registry,
    rule_v1,
    rule_v2,
)

pytestmark = pytest.mark.unit


def test_v1_is_result_points_within_bounds() -> None:
    v1 = rule_v1(0, 1000)
    assert v1.version == "v1"
    assert v1.score({"points": 30}) == 30
    assert v1.score({"points": 0, "kills": 99}) == 0
    with pytest.raises(RuleInputError) as missing:
        v1.score({"placement": 1})
    assert missing.value.field == "result.points"
    with pytest.raises(RuleInputError) as high:
        v1.score({"points": 1001})
    assert "[0, 1000]" in str(high.value)
    # v1 has no history bounds: nothing for the owner transaction to check.
    assert v1.min_gap_ms(1000) == 0


@pytest.mark.parametrize(
    ("placement", "kills", "duration", "points"),
    [
        (1, 0, 60, 100 + 0 + 1),
        (1, 3, 900, 100 + 30 + 15),
        (2, 0, 119, 95 + 0 + 1),
        (20, 1, 600, 5 + 10 + 10),
        (21, 0, 60, 0 + 0 + 1),
        (100, 0, 3600, 0 + 0 + 60),
    ],
)
def test_v2_derives_points_from_the_match_record(
    placement: int, kills: int, duration: int, points: int
) -> None:
    record = {"placement": placement, "kills": kills, "durationSeconds": duration}
    # Whatever points a client claims, v2 does not read them.
    assert rule_v2().score({**record, "points": 10**6}) == points


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"kills": 1, "durationSeconds": 60}, "result.placement"),
        ({"placement": 0, "kills": 1, "durationSeconds": 60}, "result.placement"),
        ({"placement": 1, "kills": 51, "durationSeconds": 60}, "result.kills"),
        ({"placement": 1, "kills": -1, "durationSeconds": 60}, "result.kills"),
        ({"placement": 1, "kills": 1, "durationSeconds": 59}, "result.durationSeconds"),
        ({"placement": 1, "kills": 1}, "result.durationSeconds"),
    ],
)
def test_v2_field_bounds(record: dict[str, int], field: str) -> None:
    with pytest.raises(RuleInputError) as err:
        rule_v2().score(record)
    assert err.value.field == field


def test_v2_points_per_match_bound() -> None:
    # 100 + 350 + 15 = 465 > 400: every field in bounds, the sum implausible.
    with pytest.raises(Implausible) as err:
        rule_v2().score({"placement": 1, "kills": 35, "durationSeconds": 900})
    assert err.value.bound == "max_points_per_match"
    assert "465" in err.value.detail
    assert rule_v2().score({"placement": 1, "kills": 29, "durationSeconds": 600}) == 400


def test_min_gap_and_limits() -> None:
    v2 = rule_v2()
    # 60 points per minute: 145 points need ceil(145 / 60 min) = 145 s.
    assert v2.min_gap_ms(145) == 145_000
    assert v2.min_gap_ms(61) == 61_000
    assert v2.min_gap_ms(0) == 0
    registry = default_registry()
    assert registry.limits({"v1": 500}) == (0, 0)
    assert registry.limits({"v1": 500, "v2": 120}) == (120_000, 20)
    assert registry.score_all(
        ["v2", "v1", "v2"],
        {"points": 7, "placement": 21, "kills": 0, "durationSeconds": 60},
    ) == {"v1": 7, "v2": 1}
    with pytest.raises(KeyError):
        registry.get("v9")


def test_logged_event_has_the_fingerprint_of_the_canonical_one() -> None:
    from datetime import UTC, datetime, timedelta

    import orjson

    from speed.events import ScoreEventIn, fingerprint_of_logged, normalize

    event = normalize(
        ScoreEventIn.model_validate(
            {
                "eventId": "E1",
                "playerId": "P1",
                "matchId": "M1",
                "sourceRevision": 1,
                "occurredAt": "2026-11-20T10:00:00Z",
                "region": "eu",
                "result": {
                    "points": 3,
                    "placement": 2,
                    "kills": 1,
                    "durationSeconds": 60,
                },
            }
        ),
        regions=["eu"],
        now=datetime(2026, 11, 21, tzinfo=UTC),
        max_future=timedelta(minutes=5),
    )
    event.scores = {"v1": 3, "v2": 106}
    logged = orjson.loads(event.log_json())
    assert logged["scores"] == {"v1": 3, "v2": 106}
    assert fingerprint_of_logged(logged) == event.fingerprint
