-- friends_scores.lua: live totals of some players of one partition on one board,
-- read atomically with the partition's base generation and log position.
--
-- KEYS: base hash, position counter, totals
-- ARGV: player ids (all on this partition)
-- Returns {base generation, position, {"total|version" or false per player}}
local base = redis.call("HGET", KEYS[1], "g") or "0"
local position = redis.call("GET", KEYS[2]) or "0"
local totals = {}
if #ARGV > 0 then
  totals = redis.call("HMGET", KEYS[3], unpack(ARGV))
end
return {base, position, totals}
