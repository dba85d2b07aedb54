-- Record epochs (speed/records.py is their home): a partition's dedupe and
-- contribution records go to the buckets of its current epoch; the base hash holds
-- ep (live epochs, newest first, "7,5"), n (the last epoch number), s (the slice the
-- current epoch started in), h<e> / t<e> (highest position handed out and Unix time
-- when a closed epoch was closed).
--
-- roll_epoch closes the current epoch and starts epoch n + 1 in slice ``slice``
-- ("-1": the current epoch's);
-- a closed epoch leaves when drop_through is a number >= its highest position (all
-- its events landed in a generation that publishes a landed records index) or when
-- it closed more than ``lifetime`` + margin ago (its buckets expired). Returns the
-- new ep and the list of epochs that left (their buckets are the caller's to
-- delete). Only the base hash and the position counter are touched.
local function roll_epoch(base_key, position_key, slice, wall_s, lifetime, drop_through)
  local got = redis.call("HMGET", base_key, "ep", "n", "s")
  local live = {}
  for e in string.gmatch(got[1] or "", "[^,]+") do
    live[#live + 1] = tonumber(e)
  end
  local last = tonumber(got[2] or "0")
  local high = tonumber(redis.call("GET", position_key) or "0")
  if live[1] then
    -- The current epoch closes: nothing written in it is past the counter now, nor
    -- (clock skew aside) after its slice ended (a write in a later slice rolls it
    -- first): its records are as old as that at most (speed/records.py
    -- slice_seconds).
    local step = math.max(1, math.ceil(lifetime / 2))
    local ended = (tonumber(got[3] or "0") + 1) * step
    redis.call("HSET", base_key, "h" .. live[1], high, "t" .. live[1],
      math.min(wall_s, ended))
  end
  local epoch = last + 1
  local kept, gone = {tostring(epoch)}, {}
  for _, e in ipairs(live) do
    local h = tonumber(redis.call("HGET", base_key, "h" .. e) or "0")
    local t = tonumber(redis.call("HGET", base_key, "t" .. e) or "0")
    if (drop_through and h <= drop_through) or t + lifetime + 3600 < wall_s then
      gone[#gone + 1] = e
      redis.call("HDEL", base_key, "h" .. e, "t" .. e)
    else
      kept[#kept + 1] = tostring(e)
    end
  end
  local ep = table.concat(kept, ",")
  if slice == "-1" then
    -- The caller knows no record lifetime (no slices): the slice stays.
    slice = tonumber(got[3] or "0")
  end
  redis.call("HSET", base_key, "ep", ep, "n", epoch, "s", slice)
  return ep, gone
end
