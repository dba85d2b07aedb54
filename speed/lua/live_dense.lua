-- live_dense.lua: partitions' whole changed-sets of a board, read atomically (the
-- dense live rank's per-partition parts, cached by the API per position).
--
-- One call names every partition to read on one Redis server; one per partition
-- (one group) on a Redis Cluster (speed/live.py LiveReader).
--
-- KEYS: per partition (KEY_GROUP): base hash, position counter, chz, chb
-- Returns per partition {base generation, position (integers, 0 when missing),
--          every chz member (the live entries of the changed players, display
--          order), the chb bitmap ("" when absent)}
-- The caller decodes the live scores and the base rows' scores and counts distinct
-- values from them (speed/live.py DenseChanges); O(changed players of the
-- partition), done once per partition and log position, not per read.
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local out = {}
for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  out[#out + 1] = {
    tonumber(redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0"),
    tonumber(redis.call("GET", KEYS[k + KEY_GROUP.position]) or "0"),
    redis.call("ZRANGE", KEYS[k + KEY_GROUP.chz], 0, -1),
    redis.call("GET", KEYS[k + KEY_GROUP.chb]) or "",
  }
end
return out
