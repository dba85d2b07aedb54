-- approx_rank.lua: one partition's Fenwick counts around a score, O(log B).
--
-- KEYS: Fenwick tree (BITFIELD i32), bucket boundaries (zset index -> lower), base hash,
--       position counter
-- ARGV: score
-- Returns {players in higher buckets, players in the score's bucket, all players,
--          base generation, log position}
-- Offsets: declared in speed/scripts.py (tests/unit/test_script_interfaces.py checks).
local KEY = {fw = 1, bk = 2, base = 3, position = 4}
local ARG = {score = 1}
local score = tonumber(ARGV[ARG.score])
-- Bucket members are "<index>/<bucket count>".
local size = math.max(1, redis.call("ZCARD", KEYS[KEY.bk]))
local bucket = 1
local hit = redis.call("ZREVRANGEBYSCORE", KEYS[KEY.bk], score, "-inf", "LIMIT", 0, 1)
if #hit > 0 then
  bucket = tonumber(string.sub(hit[1], 1, string.find(hit[1], "/", 1, true) - 1))
end

-- Prefix sums need the counters on the Fenwick paths of size, bucket and bucket - 1.
local function path(i)
  local slots = {}
  while i > 0 do
    slots[#slots + 1] = i
    i = i - bit.band(i, -i)
  end
  return slots
end
local function prefix(i)
  local slots = path(i)
  if #slots == 0 then
    return 0
  end
  local ops = {}
  for _, slot in ipairs(slots) do
    ops[#ops + 1] = "GET"
    ops[#ops + 1] = "i32"
    ops[#ops + 1] = "#" .. (slot - 1)
  end
  local total = 0
  for _, v in ipairs(redis.call("BITFIELD", KEYS[KEY.fw], unpack(ops))) do
    total = total + v
  end
  return total
end
local all = prefix(size)
local upto = prefix(bucket)
local below = prefix(bucket - 1)
return {
  all - upto, upto - below, all, redis.call("HGET", KEYS[KEY.base], "g") or "0",
  redis.call("GET", KEYS[KEY.position]) or "0",
}
