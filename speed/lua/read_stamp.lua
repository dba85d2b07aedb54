-- read_stamp.lua: on ONE Redis server, the read caches' whole stamp in one reply.
--
-- What live_stamp.lua reads per partition, plus the epoch (outside the partitions)
-- and any hash fields the read needs with it (the player's total and flag for an
-- approximate rank), so the API parses one reply instead of one per command (about
-- 30 µs of API CPU each, bench/RESULTS.md, issue 13). It names keys of many hash
-- slots: never sent to a Redis Cluster (api/reads.py sends live_stamp.lua per
-- partition there).
--
-- KEYS: epoch, then per partition (KEY_GROUP): base hash, position counter, flags
--       version (moved by flag_player.lua), then one hash per ARGV_REST field
-- ARGV: the number of partitions, then the hash fields (ARG_REST ..)
-- Returns {flags version (the sum of the partitions' counters: each only grows, so
--          the sum stays put only while every one does), epoch, base generation and
--          position per partition (integers, 0 when missing), then each hash
--          field's value (nil when missing)}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local flags = 0
local out = {0, redis.call("GET", KEYS[KEY.epoch])}
local partitions = tonumber(ARGV[ARG.partitions])
for i = 0, partitions - 1 do
  local k = KEY_GROUP.start + i * KEY_GROUP.size
  out[#out + 1] = tonumber(redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0")
  out[#out + 1] = tonumber(redis.call("GET", KEYS[k + KEY_GROUP.position]) or "0")
  flags = flags + tonumber(redis.call("GET", KEYS[k + KEY_GROUP.flags_version]) or "0")
end
out[1] = flags
local hashes = KEY_GROUP.start + partitions * KEY_GROUP.size
for j = ARG_REST, #ARGV do
  out[#out + 1] = redis.call("HGET", KEYS[hashes + j - ARG_REST], ARGV[j])
end
return out
