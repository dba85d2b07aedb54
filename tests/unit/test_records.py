"""Compact record encodings (speed/records.py, speed/partitions.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speed.partitions import Keys
from speed.records import (
    BUCKET_BITS,
    bucket_expire_at,
    compact_result,
    decode_compact,
    decode_contribution,
    dedupe_value,
    encode_contribution,
    event_periods,
    fingerprint_prefix,
    identity_hash,
    identity_key,
    identity_parts,
    long_board,
    parse_epochs,
    record_lookups,
    short_board,
    slice_of,
    slice_seconds,
)
from speed.store import decode_result

pytestmark = pytest.mark.unit

MOMENT = datetime(2026, 11, 20, 10, tzinfo=UTC)


def test_boards_the_event_names_again_are_short() -> None:
    periods = event_periods(MOMENT)
    assert short_board("daily:2026-11-20:eu", periods, "eu") == "dr"
    assert short_board("weekly:2026-W47:global", periods, "eu") == "wg"
    assert short_board("monthly:2026-11:na", periods, "na") == "mr"
    assert short_board("alltime:all:global", periods, "eu") == "ag"
    assert short_board("season:S4:global", periods, "eu") == "sS4g"
    assert short_board("season:S4:eu", periods, "eu") == "sS4r"
    # Another day (a correction moved the match away) or another region stay whole.
    assert short_board("daily:2026-11-19:eu", periods, "eu") == "daily:2026-11-19:eu"
    assert short_board("daily:2026-11-20:na", periods, "eu") == "daily:2026-11-20:na"


@given(
    window=st.sampled_from(["daily", "weekly", "monthly", "alltime", "season"]),
    period=st.sampled_from(["2026-11-20", "2026-W47", "2026-11", "all", "S4", "x"]),
    scope=st.sampled_from(["global", "eu", "na", "a:b"]),
    region=st.sampled_from(["eu", "na", "a:b"]),
)
def test_short_and_long_board_round_trip(
    window: str, period: str, scope: str, region: str
) -> None:
    periods = event_periods(MOMENT)
    board = f"{window}:{period}:{scope}"
    short = short_board(board, periods, region)
    # A short name never holds ":", a full id always does: they cannot be confused.
    assert (":" in short) == (short == board)
    assert long_board(short, periods, region) == board


def test_decode_expands_short_boards() -> None:
    body = decode_result(
        b"a|9|dr,u,1;season:S4:global,14,2,l", "E", "P", 3, event_periods(MOMENT), "eu"
    )
    assert [b["board"] for b in body["boards"]] == [
        "daily:2026-11-20:eu",
        "season:S4:global",
    ]
    assert body["boards"][1]["status"] == "late-review"
    assert (body["status"], body["partition"], body["position"]) == ("accepted", 3, 9)


statuses = st.sampled_from(["accepted", "superseded", "late-review", "quarantined"])
boards = st.sampled_from(
    [
        "daily:2026-11-20:eu",
        "daily:2026-11-19:global",
        "weekly:2026-W47:na",
        "monthly:2026-11:global",
        "alltime:all:eu",
        "season:S4:global",
        "season:S-9.x:eu",
    ]
)
items = st.fixed_dictionaries(
    {
        "board": boards,
        "total": st.integers(-(2**52), 2**52),
        "version": st.integers(0, 2**40),
    },
    optional={"status": statuses},
)


@given(
    status=statuses,
    position=st.integers(1, 2**53),
    boards=st.lists(items, max_size=12),
    fingerprint=st.binary(min_size=12, max_size=12),
)
def test_dedupe_value_round_trip(
    status: str, position: int, boards: list, fingerprint: bytes
) -> None:
    periods = event_periods(MOMENT)
    result = {"status": status, "position": position, "boards": boards}
    value = dedupe_value(fingerprint.hex(), compact_result(result, periods, "eu"))
    assert value[:8] == fingerprint_prefix(fingerprint.hex()) == fingerprint[:8]
    assert decode_compact(value[8:], periods, "eu") == (status, position, boards)


def test_ten_board_result_is_compact() -> None:
    """The default event feeds 10 boards; its saved result stays near 100 bytes."""
    periods = event_periods(MOMENT)
    scopes = ("global", "eu")
    names = [f"season:S4:{s}" for s in scopes] + [
        f"{w}:{periods[w]}:{s}"
        for w in ("daily", "weekly", "monthly", "alltime")
        for s in scopes
    ]
    result = {
        "status": "accepted",
        "position": 123456,
        "boards": [
            {"board": b, "total": 40_000 + 997 * i, "version": 300 + i}
            for i, b in enumerate(names)
        ],
    }
    value = dedupe_value("ab" * 12, compact_result(result, periods, "eu"))
    assert len(value) <= 125, value
    # Where a player's global and regional boards agree, items shrink to a name.
    for item in result["boards"]:
        item.update(total=4321, version=17)
    value = dedupe_value("ab" * 12, compact_result(result, periods, "eu"))
    assert len(value) <= 64, value


def test_identity_hash_is_length_prefixed_and_bounded() -> None:
    assert identity_hash("a:b", "c") != identity_hash("a", "b:c")
    bucket, field = identity_hash("player-" + "x" * 57, "event-" + "y" * 58)
    assert len(field) == 8 and 0 <= bucket < 2**BUCKET_BITS
    assert Keys(3).dedupe_bucket(5, bucket).startswith("lb:{p3}:rd:e5:")


@given(now=st.integers(0, 2**40), lifetime=st.integers(60, 10**9))
def test_a_bucket_outlives_its_last_write_by_a_lifetime(
    now: int, lifetime: int
) -> None:
    """The expiry backstop: a bucket written at ``now`` lives at least a lifetime;
    an epoch lasts at most one slice (half a lifetime), so a bucket goes at most
    a slice and a half after its first write (plus the clock margin)."""
    assert bucket_expire_at(now, lifetime) >= now + lifetime
    assert (
        slice_of(now + slice_seconds(lifetime), lifetime) == slice_of(now, lifetime) + 1
    )


def test_epochs_name_the_buckets_newest_first() -> None:
    assert parse_epochs(b"7,5") == [7, 5]
    assert parse_epochs("") == [] and parse_epochs(None) == []
    bucket, field = identity_hash("p", "e")
    lookups = record_lookups(Keys(1).dedupe_bucket, "p", "e", [7, 5])
    assert lookups == [
        (Keys(1).dedupe_bucket(7, bucket), field),
        (Keys(1).dedupe_bucket(5, bucket), field),
    ]


def test_identity_key_is_the_identity_hash() -> None:
    """The landed records index keys a record by the same hash as its Redis field
    (64 bits) plus 16 more bits."""
    key, check = identity_key("p1", "E1")
    _, field = identity_hash("p1", "E1")
    assert key.to_bytes(8, "big") == field and 0 <= check < 2**16


contribution_fields = st.fixed_dictionaries(
    {"r": st.integers(1, 2**40), "u": st.sampled_from(["v1", "v2"])},
    optional={"q": st.sampled_from(["E1", "e-2.x:y"]), "qr": st.integers(0, 99)},
)


@given(
    base=contribution_fields,
    points=st.dictionaries(boards, st.integers(-(2**40), 2**40), max_size=8),
    rules=st.dictionaries(boards, st.sampled_from(["v1", "v3"]), max_size=3),
    region=st.sampled_from(["eu", "na"]),
    other_day=st.booleans(),
)
def test_contribution_round_trip(
    base: dict, points: dict, rules: dict, region: str, other_day: bool
) -> None:
    """Fields -> value -> fields, whatever day and region the value is short
    against (a correction may move the match to another day or region)."""
    fields: dict = dict(base)
    fields.update({f"b:{b}": p for b, p in points.items()})
    fields.update({f"u:{b}": r for b, r in rules.items()})
    moment = MOMENT.replace(day=19) if other_day else MOMENT
    value = encode_contribution(fields, event_periods(moment), region)
    assert decode_contribution(value) == {k: str(v) for k, v in fields.items()}
    # Boards keep the order they entered the record in (apply_event.lua's too).
    decoded = list(decode_contribution(value))
    assert [n for n in decoded if n[:2] in ("b:", "u:")] == [
        n for n in fields if n[:2] in ("b:", "u:")
    ]


def test_ten_board_contribution_is_compact() -> None:
    """A match that fed the default 10 boards with the same points."""
    periods = event_periods(MOMENT)
    names = [f"season:S4:{s}" for s in ("global", "eu")] + [
        f"{w}:{periods[w]}:{s}"
        for w in ("daily", "weekly", "monthly", "alltime")
        for s in ("global", "eu")
    ]
    fields = {"r": 1, "u": "v1", **{f"b:{b}": 283 for b in names}}
    value = encode_contribution(fields, periods, "eu")
    # With its 3-byte header and NUL, the value fits jemalloc's 80-byte class.
    assert len(value) <= 76, value


def test_identity_parts_are_both_hashes() -> None:
    for player, other in (("p1", "E1"), ("a:b", "c"), ("x" * 60, "")):
        bucket, field, key, check = identity_parts(player, other)
        assert (bucket, field) == identity_hash(player, other)
        assert (key, check) == identity_key(player, other)
