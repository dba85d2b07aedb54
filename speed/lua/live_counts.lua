-- live_counts.lua: one partition's part of a live rank, read atomically.
--
-- KEYS: base hash, position counter, chz, chs, totals
-- ARGV: encoded score enc(s), encoded entry enc(s)..playerId, playerId to verify
--       ("" when the player is not on this partition)
-- Returns {base generation, position, chz above s, chs above s, chz before entry,
--          chs before entry, |chz|, |chs|, verified ("1", or the player's current
--          "total|version" when it moved since the caller read it)}
-- Offsets: declared in speed/scripts.py (tests/unit/test_script_interfaces.py checks).
local KEY = {base = 1, position = 2, chz = 3, chs = 4, totals = 5}
local ARG = {above = 1, before = 2, verify_player = 3}
local base = redis.call("HGET", KEYS[KEY.base], "g") or "0"
local position = redis.call("GET", KEYS[KEY.position]) or "0"
local above = "(" .. ARGV[ARG.above]
local before = "(" .. ARGV[ARG.before]
local verified = "1"
if ARGV[ARG.verify_player] ~= "" then
  verified = redis.call("HGET", KEYS[KEY.totals], ARGV[ARG.verify_player]) or ""
end
return {
  base, position,
  redis.call("ZLEXCOUNT", KEYS[KEY.chz], "-", above),
  redis.call("ZLEXCOUNT", KEYS[KEY.chs], "-", above),
  redis.call("ZLEXCOUNT", KEYS[KEY.chz], "-", before),
  redis.call("ZLEXCOUNT", KEYS[KEY.chs], "-", before),
  redis.call("ZCARD", KEYS[KEY.chz]),
  redis.call("ZCARD", KEYS[KEY.chs]),
  verified,
}
