-- One partition's live counts (a live_counts.lua reply group), for the group of
-- KEYS at k and of ARGV at a; above / before: the "(" exclusive ZLEXCOUNT bounds.
-- Shared by live_counts.lua and live_nearby.lua (same KEY_GROUP / ARG_GROUP names).

-- Set bits among the first n base rows of a partition (its chb bitmap).
local function changed_rows_before(chb, n)
  if n <= 0 then
    return 0
  end
  return redis.call("BITCOUNT", chb, 0, n - 1, "BIT")
end

local function counts_part(k, a, above, before)
  local chz, chb = KEYS[k + KEY_GROUP.chz], KEYS[k + KEY_GROUP.chb]
  local verified = "1"
  local player = ARGV[a + ARG_GROUP.verify_player]
  if player ~= "" then
    verified = redis.call("HGET", KEYS[k + KEY_GROUP.totals], player) or ""
  end
  local chb_above = tonumber(ARGV[a + ARG_GROUP.chb_above])
  local chb_before = tonumber(ARGV[a + ARG_GROUP.chb_before])
  local chs_above = changed_rows_before(chb, chb_above)
  -- The same bound twice (a count above a score, or no tie before the entry):
  -- one BITCOUNT.
  local chs_before = chs_above
  if chb_before ~= chb_above then
    chs_before = changed_rows_before(chb, chb_before)
  end
  return {
    tonumber(redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0"),
    tonumber(redis.call("GET", KEYS[k + KEY_GROUP.position]) or "0"),
    redis.call("ZLEXCOUNT", chz, "-", above),
    chs_above,
    redis.call("ZLEXCOUNT", chz, "-", before),
    chs_before,
    redis.call("ZCARD", chz),
    redis.call("BITCOUNT", chb),
    verified,
  }
end
