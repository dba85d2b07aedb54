-- live_stamp.lua: what a cached live top list depends on, in one reply.
--
-- KEYS: flags version, dataset epoch, then per partition: base hash, position counter
-- Returns {flags version, epoch, then per partition: base generation, position}:
--   integers (0 when missing) but the epoch, a 62-bit number returned as its text
--   (a Lua number would round it) or "0"
-- One reply instead of one per key: parsing 2 + 2 * partitions replies was most of
-- the API's CPU for a cached live top list (bench/RESULTS.md, issue 13).
-- Offsets: declared in speed/scripts.py (tests/unit/test_script_interfaces.py checks).
local KEY = {flags_version = 1, epoch = 2}
local KEY_GROUP = {start = 3, size = 2, base = 0, position = 1}
local out = {
  tonumber(redis.call("GET", KEYS[KEY.flags_version]) or "0"),
  redis.call("GET", KEYS[KEY.epoch]) or "0",
}
for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  out[#out + 1] = tonumber(redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0")
  out[#out + 1] = tonumber(redis.call("GET", KEYS[k + KEY_GROUP.position]) or "0")
end
return out
