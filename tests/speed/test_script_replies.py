"""The positional replies of the read scripts have the shape speed/scripts.py
declares (run against a real redis-server)."""

from __future__ import annotations

import pytest
import redis

from speed.partitions import EPOCH_KEY, Keys, encode_entry, encode_score
from speed.scripts import (
    APPROX_RANK,
    FRIENDS_SCORES,
    INTERFACES,
    LIVE_COUNTS,
    LIVE_DENSE,
    LIVE_NEARBY,
    LIVE_WINDOW,
    source,
)

pytestmark = pytest.mark.integration

BOARD = "alltime:all:global"


def run(client: redis.Redis, name: str, keys: list[str], args: list[object]) -> list:
    return client.register_script(source(INTERFACES[name]))(keys=keys, args=args)  # type: ignore[return-value]


def test_read_script_replies_have_declared_fields(redis_client: redis.Redis) -> None:
    keys = Keys(0)
    redis_client.hset(keys.totals(BOARD), "p1", "7|1")
    redis_client.zadd(keys.changed_live(BOARD), {encode_entry(7, "p1"): 0})
    redis_client.set(keys.position, 3)
    # Changed base rows 2 and 9 of the partition (snapshot side of the changed-set).
    redis_client.setbit(keys.changed_snapshot(BOARD), 2, 1)
    redis_client.setbit(keys.changed_snapshot(BOARD), 9, 1)
    group = {
        "base": keys.base_generation,
        "position": keys.position,
        "chz": keys.changed_live(BOARD),
        "chb": keys.changed_snapshot(BOARD),
        "chc": keys.changed_counts(BOARD),
    }
    # Partition 1 (empty) after partition 0: one reply per group, in order.
    other = Keys(1)
    other_group = {
        "base": other.base_generation,
        "position": other.position,
        "chz": other.changed_live(BOARD),
        "chb": other.changed_snapshot(BOARD),
        "chc": other.changed_counts(BOARD),
    }
    both = run(
        redis_client,
        "live_counts",
        LIVE_COUNTS.keys_of(
            {"epoch": EPOCH_KEY},
            [
                {
                    **group,
                    "totals": keys.totals(BOARD),
                    "flags_version": keys.flags_version,
                },
                {
                    **other_group,
                    "totals": other.totals(BOARD),
                    "flags_version": other.flags_version,
                },
            ],
        ),
        LIVE_COUNTS.args_of(
            {
                "above": encode_score(5),
                "before": encode_entry(5, "p0"),
                "expected": "",
            },
            [
                {
                    "verify_player": "p1",
                    "chb_above": 3,
                    "chb_before": 10,
                    "known": "",
                    "held": "",
                },
                {
                    "verify_player": "",
                    "chb_above": 0,
                    "chb_before": 0,
                    "known": "",
                    "held": "",
                },
            ],
        ),
    )
    assert len(both) == 2
    counts, empty = both
    assert empty == [0, 0, 0, 0, 0, 0, 0, 0, b"1", b"0|0|0|0"]
    assert len(counts) == len(LIVE_COUNTS.fields)
    assert LIVE_COUNTS.field(counts, "chz_above") == 1
    assert LIVE_COUNTS.field(counts, "chs_above") == 1
    assert LIVE_COUNTS.field(counts, "chs_before") == 2
    assert LIVE_COUNTS.field(counts, "chs_size") == 2
    assert LIVE_COUNTS.field(counts, "position") == 3
    assert LIVE_COUNTS.field(counts, "verified") == b"7|1"
    # "g|position|flags version|epoch" as read (no base, no flags, no epoch yet).
    assert LIVE_COUNTS.field(counts, "stamp") == b"0|3|0|0"

    def call(*, known: str | bytes = "", expected: str = "", held: str = "") -> list:
        """live_counts on the same board and player, with what the caller knows
        (the stamp of its sizes, whether it holds the changed-set) and the total
        it guessed."""
        return run(
            redis_client,
            "live_counts",
            LIVE_COUNTS.keys_of(
                {"epoch": EPOCH_KEY},
                [
                    {
                        **group,
                        "totals": keys.totals(BOARD),
                        "flags_version": keys.flags_version,
                    }
                ],
            ),
            LIVE_COUNTS.args_of(
                {
                    "above": encode_score(5),
                    "before": encode_entry(5, "p0"),
                    "expected": expected,
                },
                [
                    {
                        "verify_player": "p1",
                        "chb_above": 3,
                        "chb_before": 10,
                        "known": known,
                        "held": held,
                    }
                ],
            ),
        )

    # Sent back as known while it holds: the sizes are not counted (-1), the rest
    # is the same; once the flags version moves, they are counted again.
    def again() -> list:
        return call(known=b"0|3|0|0")[0]

    skipped = again()
    sizes = [LIVE_COUNTS.fields.index(f) for f in ("chz_size", "chs_size")]
    assert [skipped[i] for i in sizes] == [-1, -1]
    assert [v for i, v in enumerate(skipped) if i not in sizes] == [
        v for i, v in enumerate(counts) if i not in sizes
    ]
    redis_client.incr(keys.flags_version)
    counted = again()
    assert [counted[i] for i in sizes] == [1, 2]
    assert LIVE_COUNTS.field(counted, "stamp") == b"0|3|1|0"
    # Held by the caller for the stamp: none of the six counts is counted (-1),
    # the player is still verified; at another stamp, all are counted.
    held = call(known=b"0|3|1|0", held="1")[0]
    assert held[2:8] == [-1] * 6
    assert held[:2] == counted[:2] and held[8:] == counted[8:]
    assert call(known=b"0|3|0|0", held="1")[0] == counted
    redis_client.delete(keys.flags_version)  # as before, for the reads below

    # The player verified at another total than the caller guessed: nothing is
    # counted, its total comes back alone; at the guessed total, the counts.
    def guessed(total: str) -> list:
        return call(expected=total)

    assert guessed("6") == [b"moved", b"7|1"]
    (same,) = guessed("7")
    assert same == counts

    window, other_window = run(
        redis_client,
        "live_window",
        LIVE_WINDOW.keys_of({}, [group, other_group]),
        LIVE_WINDOW.args_of(
            {
                "forward_start": "-",
                "forward_limit": 5,
                "backward_start": "+",
                "backward_limit": 0,
            },
            [
                {"snapshot_first": 0, "snapshot_stop": 10},
                {"snapshot_first": 0, "snapshot_stop": 4},
            ],
        ),
    )
    assert other_window == [0, 0, 0, 0, [], [], []]
    assert len(window) == len(LIVE_WINDOW.fields)
    assert LIVE_WINDOW.field(window, "forward") == [encode_entry(7, "p1")]
    assert LIVE_WINDOW.field(window, "snapshot") == [2, 9]
    assert LIVE_WINDOW.field(window, "chs_size") == 2
    (narrow,) = run(
        redis_client,
        "live_window",
        LIVE_WINDOW.keys_of({}, [group]),
        LIVE_WINDOW.args_of(
            {
                "forward_start": "-",
                "forward_limit": 0,
                "backward_start": "+",
                "backward_limit": 0,
            },
            [{"snapshot_first": 3, "snapshot_stop": 9}],
        ),
    )
    assert LIVE_WINDOW.field(narrow, "snapshot") == []

    # live_nearby: live_counts' reply, then live_window's last three fields for
    # the window around the entry "before", from one call.
    entry = encode_entry(5, "p0")
    nearby = run(
        redis_client,
        "live_nearby",
        LIVE_NEARBY.keys_of(
            {"epoch": EPOCH_KEY},
            [
                {
                    **group,
                    "totals": keys.totals(BOARD),
                    "flags_version": keys.flags_version,
                },
                {
                    **other_group,
                    "totals": other.totals(BOARD),
                    "flags_version": other.flags_version,
                },
            ],
        ),
        LIVE_NEARBY.args_of(
            {
                "above": encode_score(5),
                "before": entry,
                "expected": "",
                "forward_limit": 5,
                "backward_limit": 6,
                "forward_max": "+",
                "backward_min": "-",
                "top": "",
            },
            [
                {
                    "verify_player": "p1",
                    "chb_above": 3,
                    "chb_before": 10,
                    "known": "",
                    "held": "",
                    "snapshot_first": 0,
                    "snapshot_stop": 10,
                    "chb_top": 0,
                },
                {
                    "verify_player": "",
                    "chb_above": 0,
                    "chb_before": 0,
                    "known": "",
                    "held": "",
                    "snapshot_first": 0,
                    "snapshot_stop": 4,
                    "chb_top": 0,
                },
            ],
        ),
    )
    around = run(
        redis_client,
        "live_window",
        LIVE_WINDOW.keys_of({}, [group, other_group]),
        LIVE_WINDOW.args_of(
            {
                "forward_start": b"(" + entry,
                "forward_limit": 5,
                "backward_start": b"(" + entry,
                "backward_limit": 6,
            },
            [
                {"snapshot_first": 0, "snapshot_stop": 10},
                {"snapshot_first": 0, "snapshot_stop": 4},
            ],
        ),
    )
    assert [len(r) for r in nearby] == [len(LIVE_NEARBY.fields)] * 2
    assert [r[: len(LIVE_COUNTS.fields)] for r in nearby] == both
    assert [[LIVE_NEARBY.field(r, f) for f in LIVE_WINDOW.fields] for r in nearby] == (
        around
    )
    assert LIVE_NEARBY.field(nearby[0], "backward") == [encode_entry(7, "p1")]
    assert LIVE_NEARBY.field(nearby[0], "snapshot") == [2, 9]
    assert [LIVE_NEARBY.field(nearby[0], f) for f in ("chz_top", "chs_top")] == [0, 0]
    # Bounded: the changed players read stop at backward_min (inclusive).
    for bound, want in (
        (b"[" + encode_entry(7, "p1"), [encode_entry(7, "p1")]),
        (b"[" + encode_entry(6, "p9"), []),
    ):
        (bounded,) = run(
            redis_client,
            "live_nearby",
            LIVE_NEARBY.keys_of(
                {"epoch": EPOCH_KEY},
                [
                    {
                        **group,
                        "totals": keys.totals(BOARD),
                        "flags_version": keys.flags_version,
                    }
                ],
            ),
            LIVE_NEARBY.args_of(
                {
                    "above": encode_score(5),
                    "before": entry,
                    "expected": "",
                    "forward_limit": 5,
                    "backward_limit": 6,
                    "forward_max": "+",
                    "backward_min": bound,
                    "top": "",
                },
                [
                    {
                        "verify_player": "p1",
                        "chb_above": 3,
                        "chb_before": 10,
                        "known": "",
                        "held": "",
                        "snapshot_first": 0,
                        "snapshot_stop": 10,
                        "chb_top": 0,
                    }
                ],
            ),
        )
        assert LIVE_NEARBY.field(bounded, "backward") == want
        assert bounded[: len(LIVE_COUNTS.fields)] == both[0]
    # With a top score: what live_counts counts above it, in the same call.
    (topped,) = run(
        redis_client,
        "live_nearby",
        LIVE_NEARBY.keys_of(
            {"epoch": EPOCH_KEY},
            [
                {
                    **group,
                    "totals": keys.totals(BOARD),
                    "flags_version": keys.flags_version,
                }
            ],
        ),
        LIVE_NEARBY.args_of(
            {
                "above": encode_score(5),
                "before": entry,
                "expected": "",
                "forward_limit": 0,
                "backward_limit": 0,
                "forward_max": "+",
                "backward_min": "-",
                "top": encode_score(6),
            },
            [
                {
                    "verify_player": "",
                    "chb_above": 3,
                    "chb_before": 10,
                    "known": "",
                    "held": "",
                    "snapshot_first": 0,
                    "snapshot_stop": 0,
                    "chb_top": 3,
                }
            ],
        ),
    )
    (above_six,) = run(
        redis_client,
        "live_counts",
        LIVE_COUNTS.keys_of(
            {"epoch": EPOCH_KEY},
            [
                {
                    **group,
                    "totals": keys.totals(BOARD),
                    "flags_version": keys.flags_version,
                }
            ],
        ),
        LIVE_COUNTS.args_of(
            {"above": encode_score(6), "before": encode_score(6), "expected": ""},
            [
                {
                    "verify_player": "",
                    "chb_above": 3,
                    "chb_before": 3,
                    "known": "",
                    "held": "",
                }
            ],
        ),
    )
    assert (
        [LIVE_NEARBY.field(topped, f) for f in ("chz_top", "chs_top")]
        == [
            LIVE_COUNTS.field(above_six, "chz_above"),
            LIVE_COUNTS.field(above_six, "chs_above"),
        ]
        == [1, 1]
    )

    counts_group = {
        **group,
        "totals": keys.totals(BOARD),
        "flags_version": keys.flags_version,
    }
    (dense,) = run(
        redis_client,
        "live_dense",
        LIVE_DENSE.keys_of({"epoch": EPOCH_KEY}, [counts_group]),
        [],
    )
    assert len(dense) == len(LIVE_DENSE.fields)
    assert LIVE_DENSE.field(dense, "chz_members") == [encode_entry(7, "p1")]
    assert LIVE_DENSE.field(dense, "position") == 3
    # The stamp a live_counts.lua reply of the same partition names.
    (counts_now,) = call()
    assert LIVE_DENSE.field(dense, "stamp") == LIVE_COUNTS.field(counts_now, "stamp")

    friends = run(
        redis_client,
        "friends_scores",
        FRIENDS_SCORES.keys_of(
            {
                "base": keys.base_generation,
                "position": keys.position,
                "totals": keys.totals(BOARD),
            }
        ),
        FRIENDS_SCORES.args_of({}, rest=["p1", "p2"]),
    )
    assert len(friends) == len(FRIENDS_SCORES.fields)
    assert FRIENDS_SCORES.field(friends, "totals") == [b"7|1", None]

    approx = run(
        redis_client,
        "approx_rank",
        APPROX_RANK.keys_of(
            {
                "fw": keys.fenwick(BOARD),
                "bk": keys.buckets(BOARD),
                "base": keys.base_generation,
                "position": keys.position,
            }
        ),
        APPROX_RANK.args_of({"score": 7, "bucket": "", "size": ""}),
    )
    assert len(approx) == len(APPROX_RANK.fields)
    assert APPROX_RANK.field(approx, "position") == b"3"
    # The caller's bucket (from the base generation's boundaries) reads the same.
    given = run(
        redis_client,
        "approx_rank",
        APPROX_RANK.keys_of(
            {
                "fw": keys.fenwick(BOARD),
                "bk": keys.buckets(BOARD),
                "base": keys.base_generation,
                "position": keys.position,
            }
        ),
        APPROX_RANK.args_of({"score": 7, "bucket": 1, "size": 1}),
    )
    assert given == approx


def test_counting_in_a_held_changed_set_equals_redis(
    redis_client: redis.Redis,
) -> None:
    """What a live read counts and reads in a changed-set it holds
    (speed/live.py HeldPart, LiveReader._count_held) equals what live_nearby.lua
    counts and reads in Redis, for every bound: ties, a shared score prefix,
    windows bounded or not, limits shorter and longer than what is there."""
    from random import Random

    from speed.live import Around, HeldBounds, LiveReader, held_part

    rng = Random(7)
    keys = Keys(0)
    chz, chb = keys.changed_live(BOARD), keys.changed_snapshot(BOARD)
    members = sorted(
        {encode_entry(rng.randrange(6), f"p{rng.randrange(40)}") for _ in range(30)}
    )
    redis_client.zadd(chz, dict.fromkeys(members, 0))
    for row in rng.sample(range(70), 12):
        redis_client.setbit(chb, row, 1)
    redis_client.set(keys.position, 5)
    redis_client.set(EPOCH_KEY, 99)
    group = {
        "base": keys.base_generation,
        "position": keys.position,
        "chz": chz,
        "chb": chb,
        "chc": keys.changed_counts(BOARD),
        "totals": keys.totals(BOARD),
        "flags_version": keys.flags_version,
    }
    ((*dense,),) = run(
        redis_client,
        "live_dense",
        LIVE_DENSE.keys_of({"epoch": EPOCH_KEY}, [group]),
        [],
    )
    part = held_part(dense)
    assert part.members == members and part.stamp == b"0|5|0|99"
    probes = [*members, encode_entry(3, ""), encode_entry(9, "z"), encode_entry(0, "~")]
    for _ in range(200):
        score = rng.randrange(-1, 8)
        entry = rng.choice(probes)
        forward_max = rng.choice([b"+", b"[" + rng.choice(probes)])
        backward_min = rng.choice([b"-", b"[" + rng.choice(probes)])
        first = rng.randrange(0, 80)
        stop = rng.randrange(0, 80)
        # Local rows: the entry is at or below its score (before >= above >= 0).
        rows_above = rng.randrange(0, 80)
        groups = {
            "verify_player": "",
            "chb_above": rows_above,
            "chb_before": rng.randrange(rows_above, 80),
            "snapshot_first": first,
            "snapshot_stop": stop,
            "chb_top": rng.randrange(0, 80),
        }
        top = rng.choice([b"", encode_score(rng.randrange(0, 7))])
        limits = (rng.randrange(0, 8), rng.randrange(0, 8))

        named = {
            "above": encode_score(score),
            "before": entry,
            "expected": "",
            "forward_limit": limits[0],
            "backward_limit": limits[1],
            "forward_max": forward_max,
            "backward_min": backward_min,
            "top": top,
        }

        def nearby(named: dict, groups: dict, held: bool) -> list:
            (reply,) = run(
                redis_client,
                "live_nearby",
                LIVE_NEARBY.keys_of({"epoch": EPOCH_KEY}, [group]),
                LIVE_NEARBY.args_of(
                    named,
                    [
                        {
                            **groups,
                            "known": part.stamp if held else "",
                            "held": "1" if held else "",
                        }
                    ],
                ),
            )
            return reply  # type: ignore[no-any-return]

        want = nearby(named, groups, False)
        got = nearby(named, groups, True)
        assert got[2:8] == [-1] * 6 and got[10:] == [-1] * 5
        assert got[:2] + got[8:10] == want[:2] + want[8:10]
        around = Around(*limits, 0, 0, None, forward_max, backward_min)
        LiveReader._count_held(
            [got],
            [part],
            encode_score(score),
            entry,
            HeldBounds(
                [groups["chb_above"]],
                [groups["chb_before"]],
                around,
                top,
                [groups["chb_top"]],
                [first],
                [stop],
            ),
        )
        assert got == want, (score, entry, forward_max, backward_min, groups, top)
