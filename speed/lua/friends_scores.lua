-- friends_scores.lua: live totals of some players of one partition on one board,
-- read atomically with the partition's base generation and log position.
--
-- KEYS: base hash, position counter, totals
-- ARGV: player ids (all on this partition)
-- Returns {base generation, position, {"total|version" or false per player}}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local base = redis.call("HGET", KEYS[KEY.base], "g") or "0"
local position = redis.call("GET", KEYS[KEY.position]) or "0"
local totals = {}
if #ARGV >= ARG_REST then
  totals = redis.call("HMGET", KEYS[KEY.totals], unpack(ARGV, ARG_REST))
end
return {base, position, totals}
