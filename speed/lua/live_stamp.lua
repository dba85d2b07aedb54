-- live_stamp.lua: what a cached live answer depends on, for one or more partitions.
--
-- KEYS: per partition (KEY_GROUP): base hash, position counter, flags version
-- Returns {base generation, position, flags version} per partition, flattened, as
-- integers (0 when missing). Used on a Redis Cluster, one call per partition, so a
-- call's keys share a hash slot and it runs on the partition's node; on one server
-- read_stamp.lua reads every partition and the epoch in one reply (parsing replies
-- was most of the API's CPU for a cached live top list, bench/RESULTS.md, issue 13).
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local out = {}
for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  out[#out + 1] = tonumber(redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0")
  out[#out + 1] = tonumber(redis.call("GET", KEYS[k + KEY_GROUP.position]) or "0")
  out[#out + 1] = tonumber(redis.call("GET", KEYS[k + KEY_GROUP.flags_version]) or "0")
end
return out
