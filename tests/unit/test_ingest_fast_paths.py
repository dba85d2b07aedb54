"""The write path's shortcuts give exactly what the general code gives (pure logic).

Validation of a score event takes shortcuts for the common case (bench/RESULTS.md,
"Ingest: the API's CPU per event"): an ASCII id is checked by one regex, the scoring
rules of an event come from the seasons holding it without building its board
specs, and the match record is read without pydantic's serializer. Each is checked
here against the general computation it replaces.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conf.boards import BoardsConfig, Season, boards_for_event
from speed.events import (
    ID_PUNCTUATION,
    MAX_ID_CHARS,
    EventInvalid,
    EventResult,
    NormalizedEvent,
    ScoreEventIn,
    canonical_time,
    normalize_id,
    parse_rfc3339,
)
from speed.scoring import rules_for_event
from tests.conftest import event as valid_event

pytestmark = pytest.mark.unit


def reference_id(value: str) -> str | None:
    """API.md's id rule, character by character: the NFC form, or None if refused."""
    nfc = unicodedata.normalize("NFC", value)
    if not 1 <= len(nfc) <= MAX_ID_CHARS:
        return None
    for i, char in enumerate(nfc):
        category = unicodedata.category(char)
        ok = (
            char in ID_PUNCTUATION
            or category[0] == "L"
            or category == "Nd"
            or (category[0] == "M" and i > 0)
        )
        if not ok:
            return None
    return nfc


def checked(value: str) -> str | None:
    try:
        return normalize_id("eventId", value)
    except EventInvalid:
        return None


# Every ASCII character (controls, space, '/', '%', ...) plus a few non-ASCII pieces
# (combining marks, NBSP, a full-width digit), so both the shortcut and the general
# path are exercised.
ID_PIECES = st.characters(min_codepoint=0, max_codepoint=0x7F) | st.sampled_from(
    ["é", "e\u0301", "\u0915\u093f", "\u0301", "\u00a0", "５", "ß"]
)
IDS = st.lists(ID_PIECES, max_size=70).map("".join)


@settings(max_examples=500, deadline=None)
@given(IDS)
def test_id_check_agrees_with_the_character_rule(value: str) -> None:
    assert checked(value) == reference_id(value)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("P2", "P2"),
        ("a" * 64, "a" * 64),
        ("a" * 65, None),
        ("", None),
        ("M-91_x.y:z", "M-91_x.y:z"),
        ("a/b", None),
        ("a b", None),
        ("a\n", None),  # a regex `$` would let a trailing newline through
        ("Jose\u0301", "José"),
    ],
)
def test_id_examples(value: str, expected: str | None) -> None:
    assert checked(value) == expected


def _season(sid: str, start: datetime, days: int, rule: str) -> Season:
    return Season(id=sid, start=start, end=start + timedelta(days=days), rule=rule)


T0 = datetime(2026, 11, 1, tzinfo=UTC)
CONFIG = BoardsConfig(
    regions=["eu", "na"],
    rule="v1",
    seasons=[
        _season("A", T0, 30, "v1"),
        _season("B", T0 + timedelta(days=10), 5, "v2"),
        _season("C", T0 + timedelta(days=40), 3, "v2"),
    ],
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=-5 * 86_400, max_value=50 * 86_400),
    st.sampled_from(["eu", "na"]),
    st.sampled_from([CONFIG, CONFIG.model_copy(update={"rule": "v2"})]),
)
def test_rules_of_an_event_are_its_boards_rules(
    offset_s: int, region: str, config: BoardsConfig
) -> None:
    moment = T0 + timedelta(seconds=offset_s)
    specs = boards_for_event(config, moment, region)
    assert rules_for_event(config, moment) == {spec.rule for spec in specs}


def test_rules_at_season_edges() -> None:
    b_start = T0 + timedelta(days=10)
    assert rules_for_event(CONFIG, b_start) == {"v1", "v2"}  # start is inclusive
    assert rules_for_event(CONFIG, b_start - timedelta(microseconds=1)) == {"v1"}
    assert rules_for_event(CONFIG, b_start + timedelta(days=5)) == {"v1"}  # exclusive


def score_event_in(**fields: Any) -> ScoreEventIn:
    """The tests' valid event (``tests.conftest.event``) with ``fields`` set."""
    return ScoreEventIn(**valid_event(**fields))


# What orjson parses as an integer (beyond it, a float the schema refuses).
WIRE_INTS = st.none() | st.integers(min_value=-(2**63), max_value=2**64 - 1)


@given(
    st.builds(
        EventResult,
        points=WIRE_INTS,
        placement=WIRE_INTS,
        kills=WIRE_INTS,
        durationSeconds=WIRE_INTS,
    )
)
def test_record_is_what_pydantic_dumps(result: EventResult) -> None:
    event = score_event_in(result=result)
    normalized = NormalizedEvent(event, datetime(2026, 11, 20, 10, tzinfo=UTC))
    assert normalized.record == result.model_dump()
    assert list(normalized.record) == list(result.model_dump())


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.just(UTC),
    ),
    st.sampled_from(["", ".1", ".12", ".123", ".1234", ".123456789"]),
    st.sampled_from(["Z", "z", "+00:00", "+05:30", "-23:59"]),
    st.sampled_from(["T", "t", " "]),
)
def test_canonical_time_from_the_text_is_the_formatted_one(
    moment: datetime, fraction: str, zone: str, sep: str
) -> None:
    digits = f"{moment.microsecond:06d}000"[: len(fraction) - 1]
    m = moment
    text = (
        f"{m.year:04d}-{m.month:02d}-{m.day:02d}{sep}"
        f"{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
        + (f".{digits}" if fraction else "")
        + zone
    )
    try:
        parsed = parse_rfc3339(text)
    except ValueError:  # an offset that leaves years 1-9999
        return
    formatted = parsed.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert canonical_time(text, parsed) == formatted
    assert canonical_time("", parsed) == formatted


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40),
    st.none() | st.integers(min_value=0, max_value=400),
    st.booleans(),
    st.dictionaries(
        st.sampled_from(["v1", "v2", "v10", "a", "zz"]),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
    ),
)
def test_logged_event_is_the_sorted_dump(
    reason: str, placement: int | None, correction: bool, scores: dict[str, int]
) -> None:
    # Reasons may hold quotes, commas and the very key the splice looks for.
    reason = reason + ',"sourceRevision":1,"scores":{}'
    event = score_event_in(
        sourceRevision=7,
        result=EventResult(points=5, placement=placement),
        kind="correction" if correction else "result",
        reason=reason,
    )
    normalized = NormalizedEvent(event, datetime(2026, 11, 20, 10, tzinfo=UTC))
    normalized.scores = scores
    expected = orjson.dumps(
        {**normalized.body, "scores": scores}, option=orjson.OPT_SORT_KEYS
    )
    assert normalized.log_json() == expected
