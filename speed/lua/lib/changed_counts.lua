-- Counts of a changed-set's snapshot side per block of base rows, so that "changed
-- base rows among the first n" costs a few counters and one block's BITCOUNT, not a
-- BITCOUNT of the whole prefix: at 100 M players a partition's bitmap (chb) is
-- 12.5 M bits and a prefix count of half of it took 170-224 us of Redis, eight
-- per live rank (bench/RESULTS.md, "Reads at the seeds' scale").
--
-- chc: per block k of CHANGED_BLOCK_ROWS rows of chb, its set bits, as BITFIELD
-- u32 slot #k (big-endian, 4 bytes each; slots past the string's end are 0).
-- Invariant: slot k = BITCOUNT of chb's rows [k * B, (k + 1) * B), whenever chc
-- exists. chc absent: chb has no set bit, or was written by a stack older than
-- the counts and not touched since (the readers then count chb itself). Every
-- writer of chb sets its bits through set_changed_rows, which keeps chc
-- (speed/partitions.py CHANGED_BLOCK_ROWS is the same number).
local CHANGED_BLOCK_ROWS = 65536
local CHANGED_BLOCK_BYTES = CHANGED_BLOCK_ROWS / 8

local function ensure_changed_counts(chb, chc)
  if redis.call("EXISTS", chc) == 1 then
    return
  end
  local bytes = redis.call("STRLEN", chb)
  local ops = {}
  for k = 0, math.ceil(bytes / CHANGED_BLOCK_BYTES) - 1 do
    local first = k * CHANGED_BLOCK_BYTES
    local set = redis.call("BITCOUNT", chb, first, first + CHANGED_BLOCK_BYTES - 1)
    if set > 0 then
      ops[#ops + 1] = "SET"
      ops[#ops + 1] = "u32"
      ops[#ops + 1] = "#" .. k
      ops[#ops + 1] = set
    end
  end
  if #ops > 0 then
    redis.call("BITFIELD", chc, unpack(ops))
  end
end

-- rows: base rows whose bit of chb a writer just turned from 0 to 1.
local function count_set_rows(chc, rows)
  local per_block, blocks = {}, {}
  for _, row in ipairs(rows) do
    local k = math.floor(row / CHANGED_BLOCK_ROWS)
    if per_block[k] == nil then
      per_block[k] = 0
      blocks[#blocks + 1] = k
    end
    per_block[k] = per_block[k] + 1
  end
  if #blocks == 0 then
    return
  end
  local ops = {}
  for _, k in ipairs(blocks) do
    ops[#ops + 1] = "INCRBY"
    ops[#ops + 1] = "u32"
    ops[#ops + 1] = "#" .. k
    ops[#ops + 1] = per_block[k]
  end
  redis.call("BITFIELD", chc, unpack(ops))
end

-- Set the bits of rows in chb (at most a few hundred: one BITFIELD) and count the
-- ones that were 0 in chc, building chc first from an older bitmap without it.
-- Returns how many bits were 0.
local function set_changed_rows(chb, chc, rows)
  if #rows == 0 then
    return 0
  end
  ensure_changed_counts(chb, chc)
  local ops = {}
  for _, row in ipairs(rows) do
    ops[#ops + 1] = "SET"
    ops[#ops + 1] = "u1"
    ops[#ops + 1] = row
    ops[#ops + 1] = 1
  end
  local before = redis.call("BITFIELD", chb, unpack(ops))
  local turned = {}
  for i, old in ipairs(before) do
    if old == 0 then
      turned[#turned + 1] = rows[i]
    end
  end
  count_set_rows(chc, turned)
  return #turned
end

-- The sum of chc's slots [0, blocks) (the bytes GETRANGE found: fewer when the
-- string ends before, the rest being 0).
local function sum_block_counts(chc, blocks)
  local raw = redis.call("GETRANGE", chc, 0, 4 * blocks - 1)
  local total, at, slots = 0, 1, math.floor(#raw / 4)
  while slots > 0 do
    local take = math.min(slots, 1000)
    local v = {struct.unpack(">" .. string.rep("I4", take), raw, at)}
    for i = 1, take do
      total = total + v[i]
    end
    at = v[take + 1]
    slots = slots - take
  end
  return total
end

-- Set bits of chb among its first n rows, for each n of ns (a list): the sum of
-- the per-block counts of the whole blocks before n plus a BITCOUNT of the rest
-- (at most one block), or without chc a BITCOUNT of the prefix; one EXISTS and
-- one GETRANGE of the counts for them all. A live rank counts two prefixes per partition and a live
-- nearby three (above its score, before its entry, above its window's top),
-- nearly always ending in the same block; each apart re-read and re-summed the
-- counters before it, up to 190 per partition at 100 M players.
local function changed_rows_prefixes(chb, chc, ns)
  local out = {}
  local most = 0
  for _, n in ipairs(ns) do
    if n > 0 then
      most = math.max(most, math.floor(n / CHANGED_BLOCK_ROWS))
    end
  end
  if most == 0 or redis.call("EXISTS", chc) == 0 then
    for i, n in ipairs(ns) do
      out[i] = n > 0 and redis.call("BITCOUNT", chb, 0, n - 1, "BIT") or 0
    end
    return out
  end
  -- before[k]: the sum of slots [0, k), for k up to the slots GETRANGE found
  -- (fewer than most when the string ends before: the rest are 0).
  local raw = redis.call("GETRANGE", chc, 0, 4 * most - 1)
  local before, total, at, slots = {[0] = 0}, 0, 1, math.floor(#raw / 4)
  local k = 0
  while k < slots do
    local take = math.min(slots - k, 1000)
    local v = {struct.unpack(">" .. string.rep("I4", take), raw, at)}
    for i = 1, take do
      total = total + v[i]
      before[k + i] = total
    end
    at = v[take + 1]
    k = k + take
  end
  for i, n in ipairs(ns) do
    if n <= 0 then
      out[i] = 0
    else
      local whole = math.floor(n / CHANGED_BLOCK_ROWS)
      local count = before[math.min(whole, slots)]
      local first = whole * CHANGED_BLOCK_ROWS
      if n > first then
        count = count + redis.call("BITCOUNT", chb, first, n - 1, "BIT")
      end
      out[i] = count
    end
  end
  return out
end

-- Set bits of chb.
local function changed_rows_total(chb, chc)
  if redis.call("EXISTS", chc) == 0 then
    return redis.call("BITCOUNT", chb)
  end
  return sum_block_counts(chc, math.floor(redis.call("STRLEN", chc) / 4))
end
