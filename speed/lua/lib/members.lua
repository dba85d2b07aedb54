-- Changed-set members, totals and Fenwick trees as every writing script keeps them
-- (apply_event.lua writes them, flag_player.lua and rebase_partition.lua move them;
-- speed/partitions.py encode_entry is the Python side).
--
-- enc(s) is 8 bytes big-endian of 2^52 - s, so byte order of members is display
-- order: score descending, then player id ascending (memcmp order of UTF-8). On
-- first_achieved boards members are enc(s) .. tenc(achievedMs) .. playerId, tenc(t)
-- being 8 bytes big-endian of 2^52 + t: the earlier achiever first among equal scores.
local SCORE_OFFSET = 4503599627370496 -- 2^52: scores stay within +-2^52

local function enc(score)
  return struct.pack(">I8", SCORE_OFFSET - score)
end

local function tenc(achieved)
  return struct.pack(">I8", SCORE_OFFSET + achieved)
end

-- The member of a total whose achievedMs is known when the board is first_achieved
-- (a totals value or a base row carries one there and only there).
local function member_of(score, achieved, player)
  if not achieved then
    return enc(score) .. player
  end
  return enc(score) .. tenc(achieved) .. player
end

-- A totals value "total|version[|achievedMs]" (sep "|") or a base row's
-- "score,version[,achievedMs]" (sep ","): its numbers, achieved nil when absent.
local function parse_total(text, sep)
  local sep1 = string.find(text, sep, 1, true)
  local sep2 = string.find(text, sep, sep1 + 1, true)
  if sep2 then
    return tonumber(string.sub(text, 1, sep1 - 1)),
      tonumber(string.sub(text, sep1 + 1, sep2 - 1)), tonumber(string.sub(text, sep2 + 1))
  end
  return tonumber(string.sub(text, 1, sep1 - 1)), tonumber(string.sub(text, sep1 + 1))
end

-- Bucket boundaries (bk) members are "<index>/<bucket count>".
local function parse_bucket(m)
  local slash = string.find(m, "/", 1, true)
  return tonumber(string.sub(m, 1, slash - 1)), tonumber(string.sub(m, slash + 1))
end

-- Fenwick point update of bucket i by d on a tree of size buckets, summed into
-- nodes[node] (several updates then cost one BITFIELD, fenwick_ops).
local function fenwick_add(nodes, i, size, d)
  while i <= size do
    nodes[i] = (nodes[i] or 0) + d
    i = i + bit.band(i, -i)
  end
end

-- The BITFIELD arguments adding nodes to a tree (BITFIELD i32, slot #(i-1)).
local function fenwick_ops(nodes)
  local ops = {}
  for i, d in pairs(nodes) do
    ops[#ops + 1] = "INCRBY"
    ops[#ops + 1] = "i32"
    ops[#ops + 1] = "#" .. (i - 1)
    ops[#ops + 1] = d
  end
  return ops
end
