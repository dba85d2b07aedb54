-- live_stamp.lua: one partition's part of what a cached live top list depends on.
--
-- KEYS: base hash, position counter
-- Returns {base generation, position} as integers (0 when missing): one reply per
-- partition where two plain reads would give two (parsing replies was most of the
-- API's CPU for a cached live top list, bench/RESULTS.md, issue 13). Keys of one
-- partition only, so on a Redis Cluster it runs on the partition's node.
-- Offsets: declared in speed/scripts.py (tests/unit/test_script_interfaces.py checks).
local KEY = {base = 1, position = 2}
return {
  tonumber(redis.call("HGET", KEYS[KEY.base], "g") or "0"),
  tonumber(redis.call("GET", KEYS[KEY.position]) or "0"),
}
