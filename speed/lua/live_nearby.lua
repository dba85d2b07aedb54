-- live_nearby.lua: the partitions' parts of a live rank and the changed players
-- around the player's entry, read atomically in one call (a live nearby read):
-- live_counts.lua and live_window.lua in one, reading each partition's base and
-- position once, with no second script call (bench/RESULTS.md), and the count
-- above the window's first score when the caller guessed it (its rank needs one
-- when the entry above the window ties with it).
--
-- One call names every partition on one Redis server; one per partition (one
-- group) on a Redis Cluster (speed/live.py LiveReader).
--
-- KEYS: per partition (KEY_GROUP): base hash, position counter, chz, chb, totals
-- ARGV: encoded score enc(s), encoded entry enc(s)..playerId, the guessed total
--       (as live_counts.lua),
--       how many changed players to read after the entry and before it, and the
--       lex bounds they are read up to ("+" and "-", or "[" and the entries of the
--       base rows the caller's window ends at: a changed player past them is not
--       in a window the caller can settle from those rows, and every member read
--       costs its conversion to Lua and back, most of a nearby's Redis CPU at
--       5 + 6 per partition), encoded score enc(t) of the guessed top ("" for
--       none), then per partition
--       (ARG_GROUP) as live_counts.lua, first and stop of a range [first, stop)
--       of its base rows, and its base rows above t (local rows,
--       speed/baserows.py)
-- Returns {"moved", total} as live_counts.lua does, else per partition
--          live_counts.lua's fields, then chz members after the
--          entry, chz members before it (nearest first), the changed local rows
--          in [first, stop), ascending (live_window.lua's last three), then chz
--          above t and changed base rows above t (0 and 0 without t); all five
--          -1 when the counts are -1 (held by the caller, as live_counts.lua)
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local score = ARGV[ARG.above]
local above = "(" .. score
local before = "(" .. ARGV[ARG.before]
local forward_limit = tonumber(ARGV[ARG.forward_limit])
local backward_limit = tonumber(ARGV[ARG.backward_limit])
local forward_max = ARGV[ARG.forward_max]
local backward_min = ARGV[ARG.backward_min]
local top = ARGV[ARG.top]
local above_top = "(" .. top
--#include live_counts_part
--#include changed_rows

-- Whether string x sorts before string y byte by byte (Lua's own < compares
-- with the C library's collation, which need not be byte order).
local function bytes_before(x, y)
  for i = 1, math.min(#x, #y) do
    local a, b = string.byte(x, i), string.byte(y, i)
    if a ~= b then
      return a < b
    end
  end
  return #x < #y
end

-- Whether every member of the score is above the lower bound of the reads before
-- the entry ("-", or "[" / "(" and an entry of a higher score).
local function bound_below_score(bound)
  if bound == "-" then
    return true
  end
  local kind = string.sub(bound, 1, 1)
  return (kind == "[" or kind == "(") and bytes_before(string.sub(bound, 2), score)
end

-- Changed players above the score: those before the entry (its part's fifth
-- field) less the ones of its score among them, read just before the entry
-- (nearest first), when that read holds all of them: it reaches a member of a
-- higher score, or it ended short of its limit at a bound below the score. Else a
-- ZLEXCOUNT, which costs 7-9 us on a partition's 125,000 changed players at 100 M
-- (two per partition were a third of a live nearby's Redis time).
local entry_of_score = string.sub(ARGV[ARG.before], 1, #score) == score
local whole_below = backward_limit > 0 and bound_below_score(backward_min)
local function changed_above(chz, backward, before_count)
  if entry_of_score then
    local same = 0
    for _, member in ipairs(backward) do
      if string.sub(member, 1, #score) ~= score then
        return before_count - same
      end
      same = same + 1
    end
    if whole_below and #backward < backward_limit then
      return before_count - same
    end
  end
  -- (A caller's entry always holds the score; any other is counted.)
  return redis.call("ZLEXCOUNT", chz, "-", above)
end

local moved, owner_raw = moved_from_guess(ARGV[ARG.expected])
if moved then
  return moved
end
local out = {}
local stamps = stamps_of_groups()
local a = ARG_GROUP.start
for k = KEY_GROUP.start, #KEYS, KEY_GROUP.size do
  local top_rows = nil
  if top ~= "" then
    top_rows = tonumber(ARGV[a + ARG_GROUP.chb_top])
  end
  local part, chs_top = counts_part(k, a, false, before, stamps[#out + 1], owner_raw, top_rows)
  if part[3] == -1 then
    -- Held by the caller for the stamp (live_counts_part.lua): it reads the
    -- window and counts above t in what it holds.
    for _ = 1, 5 do
      part[#part + 1] = -1
    end
  else
    local chz = KEYS[k + KEY_GROUP.chz]
    local forward, backward = {}, {}
    if forward_limit > 0 then
      forward = redis.call("ZRANGEBYLEX", chz, before, forward_max, "LIMIT", 0, forward_limit)
    end
    if backward_limit > 0 then
      backward = redis.call("ZREVRANGEBYLEX", chz, before, backward_min, "LIMIT", 0, backward_limit)
    end
    part[3] = changed_above(chz, backward, part[5])
    part[#part + 1] = forward
    part[#part + 1] = backward
    part[#part + 1] = changed_rows(
      KEYS[k + KEY_GROUP.chb],
      tonumber(ARGV[a + ARG_GROUP.snapshot_first]),
      tonumber(ARGV[a + ARG_GROUP.snapshot_stop])
    )
    if top ~= "" then
      part[#part + 1] = redis.call("ZLEXCOUNT", chz, "-", above_top)
      part[#part + 1] = chs_top
    else
      part[#part + 1] = 0
      part[#part + 1] = 0
    end
  end
  out[#out + 1] = part
  a = a + ARG_GROUP.size
end
return out
