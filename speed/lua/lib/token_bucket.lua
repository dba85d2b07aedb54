-- Token buckets, the one implementation of every rate limit: LB_RATE_LIMIT (per
-- player) and LB_KEY_RATE_LIMIT (per signing key) in apply_event.lua,
-- LB_READ_RATE_LIMIT (per token subject) in take_token.lua.
-- "capacity/refillSeconds" (API.md) is a burst of capacity, then ONE token every
-- refillSeconds (5/60: 5 at once, then 1 a minute). A bucket is a hash: t = tokens
-- left, ts = the ms time they were counted at; missing, it is full.

-- The bucket's tokens at now_ms, and the whole seconds until it holds one (0: it
-- holds one now).
local function bucket_level(key, capacity, refill_ms, now_ms)
  local bucket = redis.call("HMGET", key, "t", "ts")
  local tokens = tonumber(bucket[1]) or capacity
  local last = tonumber(bucket[2]) or now_ms
  local per_ms = 1 / refill_ms
  tokens = math.min(capacity, tokens + math.max(0, now_ms - last) * per_ms)
  local wait = 0
  if tokens < 1 then
    wait = math.ceil((1 - tokens) / per_ms / 1000)
  end
  return tokens, wait
end

-- Spends one of the bucket's tokens (as bucket_level counted them at now_ms).
local function bucket_spend(key, tokens, capacity, refill_ms, now_ms)
  redis.call("HSET", key, "t", tostring(tokens - 1), "ts", tostring(now_ms))
  -- A bucket idle long enough to refill completely equals a missing one.
  redis.call("PEXPIRE", key, math.ceil(capacity * refill_ms))
end
