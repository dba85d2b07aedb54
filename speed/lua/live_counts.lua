-- live_counts.lua: one partition's part of a live rank, read atomically.
--
-- KEYS: base hash, position counter, chz, chs, totals
-- ARGV: encoded score enc(s), encoded entry enc(s)..playerId, playerId to verify
--       ("" when the player is not on this partition)
-- Returns {base generation, position, chz above s, chs above s, chz before entry,
--          chs before entry, |chz|, |chs|, verified ("1", or the player's current
--          "total|version" when it moved since the caller read it)}
local base = redis.call("HGET", KEYS[1], "g") or "0"
local position = redis.call("GET", KEYS[2]) or "0"
local above = "(" .. ARGV[1]
local before = "(" .. ARGV[2]
local verified = "1"
if ARGV[3] ~= "" then
  verified = redis.call("HGET", KEYS[5], ARGV[3]) or ""
end
return {
  base, position,
  redis.call("ZLEXCOUNT", KEYS[3], "-", above),
  redis.call("ZLEXCOUNT", KEYS[4], "-", above),
  redis.call("ZLEXCOUNT", KEYS[3], "-", before),
  redis.call("ZLEXCOUNT", KEYS[4], "-", before),
  redis.call("ZCARD", KEYS[3]),
  redis.call("ZCARD", KEYS[4]),
  verified,
}
