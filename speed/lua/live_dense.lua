-- live_dense.lua: partitions' whole changed-sets of a board, read atomically (the
-- dense live rank's per-partition parts, cached by the API per position, and the
-- parts a live read holds to count in itself while they stay put).
--
-- One call names every partition to read on one Redis server; one per partition
-- (one group) on a Redis Cluster (speed/live.py LiveReader).
--
-- KEYS: the epoch (on a cluster the group's position key stands in, as for
--       live_counts.lua: nothing is held there), per partition (KEY_GROUP)
--       live_counts.lua's: base hash, position counter, chz, chb, totals (not
--       read), flags version
-- Returns per partition {base generation, position (integers, 0 when missing),
--          every chz member (the live entries of the changed players, display
--          order), the chb bitmap ("" when absent), the stamp
--          "g|position|flags version|epoch" as live_counts.lua builds it}
-- The caller decodes the live scores and the base rows' scores and counts distinct
-- values from them (speed/live.py DenseChanges); O(changed players of the
-- partition), done once per partition and log position, not per read.
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local epoch = redis.call("GET", KEYS[KEY.epoch]) or "0"
local out = {}
for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  local g = redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0"
  local position = redis.call("GET", KEYS[k + KEY_GROUP.position]) or "0"
  local flags = redis.call("GET", KEYS[k + KEY_GROUP.flags_version]) or "0"
  out[#out + 1] = {
    tonumber(g),
    tonumber(position),
    redis.call("ZRANGE", KEYS[k + KEY_GROUP.chz], 0, -1),
    redis.call("GET", KEYS[k + KEY_GROUP.chb]) or "",
    g .. "|" .. position .. "|" .. flags .. "|" .. epoch,
  }
end
return out
