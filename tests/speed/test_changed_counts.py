"""lib/changed_counts.lua on a real redis-server: a changed-set bitmap's per-block
counts stay equal to the bitmap's bits per block through the writers' path (set
bits, set again, an older bitmap without counts), and a prefix count through them
equals a count of the bits, across several blocks of CHANGED_BLOCK_ROWS rows."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
import redis

from speed.lua import include
from speed.partitions import CHANGED_BLOCK_ROWS
from speed.rebuild import bitmap_rows, rows_bitmap, rows_block_counts

pytestmark = pytest.mark.integration

B = CHANGED_BLOCK_ROWS
# ARGV[1]: "set" (rows follow: the writers' path), "prefix" (ns follow), "total".
SCRIPT = include(
    """--#include changed_counts
local chb, chc = KEYS[1], KEYS[2]
local op = ARGV[1]
if op == "set" then
  local rows = {}
  for i = 2, #ARGV do
    rows[#rows + 1] = tonumber(ARGV[i])
  end
  return set_changed_rows(chb, chc, rows)
elseif op == "prefix" then
  local ns = {}
  for i = 2, #ARGV do
    ns[#ns + 1] = tonumber(ARGV[i])
  end
  return changed_rows_prefixes(chb, chc, ns)
end
return changed_rows_total(chb, chc)
"""
)


def block_counts(client: redis.Redis, key: str) -> list[int]:
    raw = client.get(key) or b""
    counts = np.frombuffer(raw, dtype=">u4").astype(int).tolist()
    while counts and counts[-1] == 0:
        counts.pop()
    return counts


def bits_per_block(rows: set[int]) -> list[int]:
    if not rows:
        return []
    counts = np.bincount(np.array(sorted(rows)) // B).tolist()
    return counts


def test_lua_and_python_name_the_same_block_size() -> None:
    lua = (
        (Path(__file__).resolve().parents[2] / "speed" / "lua" / "lib")
        .joinpath("changed_counts.lua")
        .read_text()
    )
    found = re.search(r"^local CHANGED_BLOCK_ROWS = (\d+)$", lua, re.M)
    assert found is not None and int(found.group(1)) == CHANGED_BLOCK_ROWS


def test_counts_follow_the_bits_and_prefixes_equal_a_count(
    redis_client: redis.Redis,
) -> None:
    rng = random.Random(7)
    script = redis_client.register_script(SCRIPT)
    chb, chc = "t:chb", "t:chc"
    keys = [chb, chc]
    limit = 5 * B + 123
    truth: set[int] = set()
    probes = [0, 1, B - 1, B, B + 1, 2 * B, 3 * B + 17, limit, limit + 5 * B]

    def check() -> None:
        assert block_counts(redis_client, chc) == bits_per_block(truth)
        got = script(keys=keys, args=["prefix", *probes])
        want = [sum(1 for r in truth if r < n) for n in probes]
        assert got == want
        assert script(keys=keys, args=["total"]) == len(truth)

    # An older stack's bitmap, without counts: counted from the bits.
    older = set(rng.sample(range(limit), 300)) | {0, B - 1, B, 2 * B}
    redis_client.set(chb, rows_bitmap(sorted(older)))
    truth |= older
    assert redis_client.exists(chc) == 0
    got = script(keys=keys, args=["prefix", *probes])
    assert got == [sum(1 for r in truth if r < n) for n in probes]
    assert script(keys=keys, args=["total"]) == len(truth)
    # The first writer builds its counts, then counts what it sets.
    for _ in range(6):
        batch = rng.sample(range(limit), 200) + rng.sample(sorted(truth), 20)
        turned = script(keys=keys, args=["set", *batch])
        assert turned == len(set(batch) - truth)
        truth |= set(batch)
        check()
    assert sorted(truth) == bitmap_rows(redis_client.get(chb) or b"")
    # The rebuild writes the same counts for the same rows.
    assert np.frombuffer(rows_block_counts(truth), dtype=">u4").tolist() == (
        bits_per_block(truth)
    )


def test_a_bitmap_without_set_bits_needs_no_counts(redis_client: redis.Redis) -> None:
    script = redis_client.register_script(SCRIPT)
    keys = ["u:chb", "u:chc"]
    assert script(keys=keys, args=["prefix", 0, 5, 3 * B]) == [0, 0, 0]
    assert script(keys=keys, args=["total"]) == 0
    assert script(keys=keys, args=["set", 3 * B + 2]) == 1
    assert script(keys=keys, args=["prefix", 3 * B + 2, 3 * B + 3]) == [0, 1]
    assert block_counts(redis_client, "u:chc") == [0, 0, 0, 1]
