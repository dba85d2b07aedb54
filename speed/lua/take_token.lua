-- take_token.lua: spend one token of a bucket (lib/token_bucket.lua) if it has one.
-- The read side's rate limit (LB_READ_RATE_LIMIT): one bucket per token subject,
-- shared by every API worker.
--
-- KEY.bucket        the bucket hash (speed/readers.py)
-- ARG.now_ms        the caller's clock, ms
-- ARG.capacity      the burst
-- ARG.refill_ms     ms per token
-- Reply: {retry_after, refilled_at}: retry_after is 0 when a token was spent (then
-- refilled_at is 0), else the whole seconds until the bucket holds one (nothing
-- spent) and refilled_at the ms time it will (as a string: not truncated), before
-- which every call is refused alike (the bucket only refills; speed/readers.py).

--#include token_bucket

-- A bucket is soft state: neither the AOF nor a replica gets its writes, so under
-- appendfsync always a read's take (which rides in the read's own round trip) does
-- not make the read wait for an fsync (measured: 4-8 ms a call on this machine's
-- disk against under 1 ms). A restart or a failover forgets the buckets: every
-- subject starts again with a full one (README, LB_READ_RATE_LIMIT).
redis.set_repl(redis.REPL_NONE)

local now_ms = tonumber(ARGV[ARG.now_ms])
local capacity = tonumber(ARGV[ARG.capacity])
local refill_ms = tonumber(ARGV[ARG.refill_ms])
local tokens, wait = bucket_level(KEYS[KEY.bucket], capacity, refill_ms, now_ms)
if wait > 0 then
  return {wait, tostring(now_ms + (1 - tokens) * refill_ms)}
end
bucket_spend(KEYS[KEY.bucket], tokens, capacity, refill_ms, now_ms)
return {0, 0}
