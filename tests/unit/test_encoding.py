"""The byte encoding that makes Redis lex order equal display order, and the compact
saved result of the event script."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from speed.live import _ranked
from speed.partitions import decode_entry, encode_entry, encode_score
from speed.store import decode_result

pytestmark = pytest.mark.unit

scores = st.integers(-(2**40), 2**40)
players = st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s)


@given(st.lists(st.tuples(scores, players), min_size=2, max_size=30, unique=True))
def test_encoded_order_is_display_order(entries: list[tuple[int, str]]) -> None:
    display = sorted(entries, key=lambda e: (-e[0], e[1].encode("utf-8")))
    by_bytes = sorted(entries, key=lambda e: encode_entry(*e))
    assert by_bytes == display
    assert [decode_entry(encode_entry(*e)) for e in entries] == entries


@given(scores, scores, players)
def test_score_prefix_counts_strictly_higher(s: int, v: int, player: str) -> None:
    # ZLEXCOUNT key - (enc(v) counts members below enc(v): exactly higher scores.
    assert (encode_entry(s, player) < encode_score(v)) == (s > v)


def test_ranks_follow_first_holder_of_each_score() -> None:
    members = [encode_entry(s, p) for s, p in [(9, "a"), (9, "b"), (7, "c"), (5, "d")]]
    assert [(e["position"], e["rank"]) for e in _ranked(members, 1, None)] == [
        (1, 1),
        (2, 1),
        (3, 3),
        (4, 4),
    ]
    # A window starting inside a tie takes the tie's rank from outside the window.
    window = _ranked(members[1:], first_position=12, first_rank=10)
    assert [(e["position"], e["rank"]) for e in window] == [
        (12, 10),
        (13, 13),
        (14, 14),
    ]


def test_compact_result_round_trip() -> None:
    body = decode_result(
        "a|h|season:S4:global,pu,c;season:S3:eu,0,0,l",
        "E77",
        "P2",
        3,
    )
    assert body == {
        "eventId": "E77",
        "playerId": "P2",
        "status": "accepted",
        "boards": [
            {"board": "season:S4:global", "total": 930, "version": 12},
            {
                "board": "season:S3:eu",
                "total": 0,
                "version": 0,
                "status": "late-review",
            },
        ],
        "partition": 3,
        "position": 17,
    }
    assert decode_result(b"l|1|", "E", "P", 0)["boards"] == []


def test_headroom_buckets_are_distinct_and_above_the_top() -> None:
    from api.segments import BoardSegment
    from speed.rebase import HEADROOM_DOUBLING, HEADROOM_LINEAR, bucket_lowers

    segment = BoardSegment.__new__(BoardSegment)
    segment.bucket_lowers = np.array([0, 10, 40], dtype=np.int64)
    lowers = bucket_lowers(segment)
    assert len(lowers) == 3 + HEADROOM_LINEAR + HEADROOM_DOUBLING
    assert list(lowers[:3]) == [0, 10, 40]
    assert all(b > a for a, b in zip(lowers, lowers[1:], strict=False))
