-- approx_rank.lua: one partition's Fenwick counts around a score, O(log B).
--
-- KEYS: Fenwick tree (BITFIELD i32), bucket boundaries (zset index -> lower), base hash,
--       position counter
-- ARGV: score, the score's bucket index and the bucket count as the caller computed
--       them from the base generation's boundaries ("" "": look them up here; the
--       caller checks the base generation in the reply, so a guess made from another
--       generation is detected and asked again without it)
-- Returns {players in higher buckets, players in the score's bucket, all players,
--          base generation, log position}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local size, bucket
if ARGV[ARG.bucket] ~= "" then
  bucket = tonumber(ARGV[ARG.bucket])
  size = tonumber(ARGV[ARG.size])
else
  local score = tonumber(ARGV[ARG.score])
  -- Bucket members are "<index>/<bucket count>".
  size = math.max(1, redis.call("ZCARD", KEYS[KEY.bk]))
  bucket = 1
  local hit = redis.call("ZREVRANGEBYSCORE", KEYS[KEY.bk], score, "-inf", "LIMIT", 0, 1)
  if #hit > 0 then
    bucket = tonumber(string.sub(hit[1], 1, string.find(hit[1], "/", 1, true) - 1))
  end
end

-- Prefix sums need the counters on the Fenwick paths of size, bucket and bucket - 1:
-- one BITFIELD_RO reads all three paths (one call instead of three).
local function path(i)
  local slots = {}
  while i > 0 do
    slots[#slots + 1] = i
    i = i - bit.band(i, -i)
  end
  return slots
end
local paths = {path(size), path(bucket), path(bucket - 1)}
local ops = {}
for _, slots in ipairs(paths) do
  for _, slot in ipairs(slots) do
    ops[#ops + 1] = "GET"
    ops[#ops + 1] = "i32"
    ops[#ops + 1] = "#" .. (slot - 1)
  end
end
local sums, at = {0, 0, 0}, 1
if #ops > 0 then
  local values = redis.call("BITFIELD_RO", KEYS[KEY.fw], unpack(ops))
  for which, slots in ipairs(paths) do
    for _ = 1, #slots do
      sums[which] = sums[which] + values[at]
      at = at + 1
    end
  end
end
local all, upto, below = sums[1], sums[2], sums[3]
return {
  all - upto, upto - below, all, redis.call("HGET", KEYS[KEY.base], "g") or "0",
  redis.call("GET", KEYS[KEY.position]) or "0",
}
