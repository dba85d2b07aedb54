-- live_counts.lua: the partitions' parts of a live rank, read atomically.
--
-- On one Redis server one call names every partition (its keys span many hash
-- slots, so one atomic script reads them all, bench/RESULTS.md); on a Redis Cluster
-- the same script is called once per partition, with one group, so that a call's
-- keys share a slot (speed/live.py LiveReader).
--
-- KEYS: per partition (KEY_GROUP): base hash, position counter, chz, chb, totals
-- ARGV: encoded score enc(s), encoded entry enc(s)..playerId, the total the
--       caller guessed for the player it verifies ("" for none), then per partition
--       (ARG_GROUP): the playerId to verify ("" when the player is not on that
--       partition), the partition's base rows above s and before the entry (local
--       counts, speed/baserows.py)
-- Returns per partition {base generation, position (both integers, 0 when
--          missing), chz above s, changed base rows above s, chz before entry,
--          changed base rows before entry, |chz|, changed base rows, verified ("1",
--          or the player's current "total|version" when it moved since the caller
--          read it, "" when it has no total)};
--          the six counts -1 when the caller holds the changed-set for the stamp
--          (ARG_GROUP held); or {"moved", its "total|version"}
--          alone when it holds another total than the one guessed (nothing counted)
-- The base row counts are right for the base generation the caller assumed; the
-- caller checks it against the one returned.
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local above = "(" .. ARGV[ARG.above]
local before = "(" .. ARGV[ARG.before]
--#include live_counts_part

local moved, owner_raw = moved_from_guess(ARGV[ARG.expected])
if moved then
  return moved
end
local out = {}
local stamps = stamps_of_groups()
local a = ARG_GROUP.start
for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  out[#out + 1] = counts_part(k, a, above, before, stamps[#out + 1], owner_raw)
  a = a + ARG_GROUP.size
end
return out
