"""speed.events.validate_event, the ingest path's whole check of one event, raises
the speed layer's own errors (the API maps them to HTTP in its route)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.events import EventInvalid, TooOld, validate_event

pytestmark = pytest.mark.unit

NOW = datetime.now(UTC).replace(microsecond=0)


def raw(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "eventId": "E1",
        "playerId": "P1",
        "matchId": "M1",
        "sourceRevision": 1,
        "occurredAt": (NOW - timedelta(minutes=1)).isoformat().replace("+00:00", "Z"),
        "region": "eu",
        "result": {"points": 30},
        "kind": "result",
        "reason": None,
    }
    body.update(overrides)
    return body


def check(body: object) -> object:
    settings = Settings(rate_limit="off")
    return validate_event(body, settings, load_boards(), NOW, default_registry(0, 1000))


def test_a_valid_event_comes_back_scored() -> None:
    event = check(raw())
    assert event.event.playerId == "P1"  # type: ignore[attr-defined]
    assert event.scores  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "field", "detail"),
    [
        ([1], "body", "an event must be a JSON object"),
        (raw(eventId=None), "eventId", None),
        (raw(region="mars"), "region", None),
        (raw(result={}), "result.points", None),
    ],
)
def test_invalid_events_name_the_field(
    body: object, field: str, detail: str | None
) -> None:
    with pytest.raises(EventInvalid) as caught:
        check(body)
    assert caught.value.field == field
    assert not isinstance(caught.value, TooOld)
    if detail is not None:
        assert str(caught.value) == detail
    else:
        assert str(caught.value).startswith(f"{field}: ")


def test_too_old_keeps_its_own_error() -> None:
    # The API answers it 422 too_old (tests/api/test_score_events.py); an
    # implausible record raises conf.rules.Implausible (tests/api/test_rules_api.py).
    with pytest.raises(TooOld) as caught:
        check(raw(occurredAt="2001-01-01T00:00:00Z"))
    assert caught.value.field == "occurredAt"
