-- live_window.lua: the partitions' changed players around a place in display
-- order, read atomically.
--
-- One call names every partition on one Redis server; one per partition (one
-- group) on a Redis Cluster (speed/live.py LiveReader).
--
-- KEYS: per partition (KEY_GROUP): base hash, position counter, chz, chb, chc
-- ARGV: forward start bound, forward limit, backward start bound, backward limit
--       (ZRANGEBYLEX syntax: "-", "+", "[x", "(x"; a limit of 0 skips that read),
--       then per partition (ARG_GROUP) first and stop of a range [first, stop) of
--       its base rows (local rows, speed/baserows.py)
-- Returns per partition {base generation, position (integers, 0 when missing),
--          |chz|, changed base rows, chz forward members, chz backward members
--          (nearest first), the changed local rows in [first, stop), ascending}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local forward_limit = tonumber(ARGV[ARG.forward_limit])
local backward_limit = tonumber(ARGV[ARG.backward_limit])

--#include changed_rows

--#include changed_counts

local out = {}
local a = ARG_GROUP.start
for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  local chz, chb = KEYS[k + KEY_GROUP.chz], KEYS[k + KEY_GROUP.chb]
  local forward, backward = {}, {}
  if forward_limit > 0 then
    forward = redis.call("ZRANGEBYLEX", chz, ARGV[ARG.forward_start], "+", "LIMIT", 0, forward_limit)
  end
  if backward_limit > 0 then
    backward = redis.call("ZREVRANGEBYLEX", chz, ARGV[ARG.backward_start], "-", "LIMIT", 0, backward_limit)
  end
  out[#out + 1] = {
    tonumber(redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0"),
    tonumber(redis.call("GET", KEYS[k + KEY_GROUP.position]) or "0"),
    redis.call("ZCARD", chz), changed_rows_total(chb, KEYS[k + KEY_GROUP.chc]),
    forward, backward,
    changed_rows(chb, tonumber(ARGV[a + ARG_GROUP.snapshot_first]), tonumber(ARGV[a + ARG_GROUP.snapshot_stop])),
  }
  a = a + ARG_GROUP.size
end
return out
