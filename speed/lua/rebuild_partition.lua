-- rebuild_partition.lua: switch one partition's rebuilt speed layer in, atomically.
--
-- KEYS[1] base hash (g, pos)   KEYS[2] position counter   KEYS[3] landed position
-- then pairs (staged key, live key) from KEYS[4]: each staged key replaces its live key;
-- a pair whose staged key does not exist deletes the live key (nothing to keep).
-- ARGV: last position the build read, generation number (0 = none), its boundary on
--       this partition, landed-through position according to Delta.
--
-- Events that arrived after the build read the log would be lost by the switch: the
-- position counter tells, and the caller builds the partition again.
-- Returns {"ok", n} | {"retry", current position}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local built_through = tonumber(ARGV[ARG.built_through])
local gen = tonumber(ARGV[ARG.generation])
local bpos = tonumber(ARGV[ARG.boundary])
local landed = tonumber(ARGV[ARG.landed])

local current = tonumber(redis.call("GET", KEYS[KEY.position]) or "0")
if current > built_through then
  return {"retry", tostring(current)}
end

local switched = 0
for i = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  local staged, live = KEYS[i + KEY_GROUP.staged], KEYS[i + KEY_GROUP.live]
  if redis.call("EXISTS", staged) == 1 then
    redis.call("RENAME", staged, live)
    switched = switched + 1
  else
    redis.call("DEL", live)
  end
end
-- The base hash's record epochs stay (speed/records.py): the records restored and
-- kept are in their buckets.
redis.call("HDEL", KEYS[KEY.base], "g", "pos")
if gen > 0 then
  redis.call("HSET", KEYS[KEY.base], "g", gen, "pos", bpos)
end
-- A lost counter would hand out positions again: restore it (never move it back).
if built_through > current then
  redis.call("SET", KEYS[KEY.position], built_through)
end
local current_landed = tonumber(redis.call("GET", KEYS[KEY.landed]) or "0")
if landed > current_landed then
  redis.call("SET", KEYS[KEY.landed], landed)
end
return {"ok", tostring(switched)}
