-- live_counts.lua: one partition's part of a live rank, read atomically.
--
-- KEYS: base hash, position counter, chz, chb, totals
-- ARGV: encoded score enc(s), encoded entry enc(s)..playerId, playerId to verify
--       ("" when the player is not on this partition), the partition's base rows
--       above s and before the entry (local counts, speed/baserows.py)
-- Returns {base generation, position, chz above s, changed base rows above s, chz
--          before entry, changed base rows before entry, |chz|, changed base rows,
--          verified ("1", or the player's current "total|version" when it moved
--          since the caller read it)}
-- The base row counts are right for the base generation the caller assumed; the
-- caller checks it against the one returned.
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local base = redis.call("HGET", KEYS[KEY.base], "g") or "0"
local position = redis.call("GET", KEYS[KEY.position]) or "0"
local above = "(" .. ARGV[ARG.above]
local before = "(" .. ARGV[ARG.before]
local verified = "1"
if ARGV[ARG.verify_player] ~= "" then
  verified = redis.call("HGET", KEYS[KEY.totals], ARGV[ARG.verify_player]) or ""
end
-- Set bits among the first n base rows of the partition.
local function changed_rows_before(n)
  if n <= 0 then
    return 0
  end
  return redis.call("BITCOUNT", KEYS[KEY.chb], 0, n - 1, "BIT")
end
return {
  base, position,
  redis.call("ZLEXCOUNT", KEYS[KEY.chz], "-", above),
  changed_rows_before(tonumber(ARGV[ARG.chb_above])),
  redis.call("ZLEXCOUNT", KEYS[KEY.chz], "-", before),
  changed_rows_before(tonumber(ARGV[ARG.chb_before])),
  redis.call("ZCARD", KEYS[KEY.chz]),
  redis.call("BITCOUNT", KEYS[KEY.chb]),
  verified,
}
