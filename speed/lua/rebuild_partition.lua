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
local built_through = tonumber(ARGV[1])
local gen = tonumber(ARGV[2])
local bpos = tonumber(ARGV[3])
local landed = tonumber(ARGV[4])

local current = tonumber(redis.call("GET", KEYS[2]) or "0")
if current > built_through then
  return {"retry", tostring(current)}
end

local switched = 0
for i = 4, #KEYS, 2 do
  if redis.call("EXISTS", KEYS[i]) == 1 then
    redis.call("RENAME", KEYS[i], KEYS[i + 1])
    switched = switched + 1
  else
    redis.call("DEL", KEYS[i + 1])
  end
end
redis.call("DEL", KEYS[1])
if gen > 0 then
  redis.call("HSET", KEYS[1], "g", gen, "pos", bpos)
end
-- A lost counter would hand out positions again: restore it (never move it back).
if built_through > current then
  redis.call("SET", KEYS[2], built_through)
end
local current_landed = tonumber(redis.call("GET", KEYS[3]) or "0")
if landed > current_landed then
  redis.call("SET", KEYS[3], landed)
end
return {"ok", tostring(switched)}
