-- One partition's live counts (a live_counts.lua reply group), for the group of
-- KEYS at k and of ARGV at a; above / before: the "(" exclusive ZLEXCOUNT bounds
-- (above false: the caller counts the changed players above the score itself,
-- and the part's third field is false until it does).
-- Shared by live_counts.lua and live_nearby.lua (same KEY_GROUP / ARG_GROUP names).

-- Every group's log position and flags version, and the epoch, in one MGET: one
-- call instead of a GET per partition (each redis.call costs its fixed overhead;
-- on a cluster a call names one group and the epoch slot names a key of its
-- slot). Per group, in group order: {position, flags version, epoch}, false
-- when missing.
local function stamps_of_groups()
  local keys = {}
  for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
    keys[#keys + 1] = KEYS[k + KEY_GROUP.position]
    keys[#keys + 1] = KEYS[k + KEY_GROUP.flags_version]
  end
  keys[#keys + 1] = KEYS[KEY.epoch]
  local values = redis.call("MGET", unpack(keys))
  local epoch = values[#keys]
  local out = {}
  for i = 1, (#keys - 1) / 2 do
    out[i] = {values[2 * i - 1], values[2 * i], epoch}
  end
  return out
end

--#include changed_counts

-- Whether the player to verify holds another total than the caller guessed
-- (ARG expected: its guessed total, "" for none): the counts of this call would
-- then be for a score it does not hold, and the caller reads again at its
-- total. As (a reply {"moved", its "total|version[|achievedMs]"} or nil, what
-- the owner's totals hold for it: its value, false for none, nil when not
-- read). A guess comes from the base generation, so each read of a player
-- changed since (10 % of the players at the read bench's defaults) made all
-- the partitions' counts for nothing (issue 26). Compared as numbers: distinct
-- numbers are distinct totals, and equal ones leave it to the caller, as before.
local function moved_from_guess(expected)
  if expected == "" then
    return nil, nil
  end
  local a = ARG_GROUP.start
  for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
    local player = ARGV[a + ARG_GROUP.verify_player]
    if player ~= "" then
      local raw = redis.call("HGET", KEYS[k + KEY_GROUP.totals], player)
      if raw then
        local total = tonumber(string.match(raw, "^[^|]*"))
        if total ~= nil and total ~= tonumber(expected) then
          return {"moved", raw}, raw
        end
      end
      return nil, raw
    end
    a = a + ARG_GROUP.size
  end
  return nil, nil
end

-- seen: the group's {position, flags version, epoch} (stamps_of_groups);
-- owner_raw: the verified player's total as moved_from_guess read it (false:
-- none), nil when not read there; top_rows: a third prefix of chb to count with
-- the two of the counts (live_nearby.lua's rows above its window's top), whose
-- count is returned second (nil without it, or when the caller holds the part).
local function counts_part(k, a, above, before, seen, owner_raw, top_rows)
  local chz, chb = KEYS[k + KEY_GROUP.chz], KEYS[k + KEY_GROUP.chb]
  local chc = KEYS[k + KEY_GROUP.chc]
  local verified = "1"
  local player = ARGV[a + ARG_GROUP.verify_player]
  if player ~= "" then
    if owner_raw == nil then
      owner_raw = redis.call("HGET", KEYS[k + KEY_GROUP.totals], player)
    end
    verified = owner_raw or ""
  end
  local chb_above = tonumber(ARGV[a + ARG_GROUP.chb_above])
  local chb_before = tonumber(ARGV[a + ARG_GROUP.chb_before])
  -- As read (strings: a number prints rounded past 14 digits, an epoch is 62 bits).
  local g = redis.call("HGET", KEYS[k + KEY_GROUP.base], "g") or "0"
  local stamp = g .. "|" .. (seen[1] or "0") .. "|" .. (seen[2] or "0") .. "|" .. (seen[3] or "0")
  -- The sizes move only with the stamp: the caller knows them for this one.
  local sized = ARGV[a + ARG_GROUP.known] ~= stamp
  if not sized and ARGV[a + ARG_GROUP.held] == "1" then
    -- The caller holds this changed-set as of the stamp and counts in it itself.
    return {tonumber(g), tonumber(seen[1] or "0"), -1, -1, -1, -1, -1, -1, verified, stamp}, nil
  end
  -- The counts through chb's per-block counts (lib/changed_counts.lua): a
  -- BITCOUNT of every row before the entry was O(base rows) per partition.
  local prefixes = changed_rows_prefixes(chb, chc, {chb_above, chb_before, top_rows})
  local chs_above, chs_before = prefixes[1], prefixes[2]
  local chz_size, chs_size = -1, -1
  if sized then
    chs_size = changed_rows_total(chb, chc)
    chz_size = redis.call("ZCARD", chz)
  end
  return {
    tonumber(g),
    tonumber(seen[1] or "0"),
    above and redis.call("ZLEXCOUNT", chz, "-", above),
    chs_above,
    redis.call("ZLEXCOUNT", chz, "-", before),
    chs_before,
    chz_size,
    chs_size,
    verified,
    stamp,
  }, prefixes[3]
end
