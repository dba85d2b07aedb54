-- The record codec of apply_event.lua: base 36 numbers, contribution records
-- (speed/records.py is the format's home; speed/rebuild.py decodes the same).
-- Only apply_event.lua writes records, so only it includes this.

-- Numbers of saved results in base 36 (speed/records.py base36); exact below 2^53.
local DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
-- Written numbers of this chunk: an event's boards mostly repeat its points and
-- their totals, so most numbers are written more than once.
local base36_memo = {}
local function base36(n)
  if n >= 0 and n < 36 then
    return string.sub(DIGITS, n + 1, n + 1)
  end
  local known = base36_memo[n]
  if known then
    return known
  end
  local given = n
  local sign = ""
  if n < 0 then
    sign, n = "-", -n
  end
  -- Prepending to a string: cheaper in Lua than a table, concat and reverse.
  local out = ""
  while n > 0 do
    local d = n % 36
    out = string.sub(DIGITS, d + 1, d + 1) .. out
    n = (n - d) / 36
  end
  out = sign .. out
  base36_memo[given] = out
  return out
end

local function from_base36(text)
  if string.sub(text, 1, 1) == "-" then
    return -tonumber(string.sub(text, 2), 36)
  end
  return tonumber(text, 36)
end

-- Contribution records (speed/records.py, the format's home):
--   <day>|<week>|<region>|<entry>;<entry>...
-- entries r=<revision>, u=<rule>, q=<held eventId>, Q=<revision before the held
-- one>, <board>=<points>, ^<board>=<rule of that board>; numbers in base 36; a
-- board alone has the points of the board before it; board names short relative
-- to the record's own day, ISO week and region (as in saved results).
local function expand(name, ctx)
  if string.find(name, ":", 1, true) then
    return name
  end
  local letter, middle, code = string.sub(name, 1, 1), string.sub(name, 2, -2),
    string.sub(name, -1)
  local scope = ctx.region
  if code == "g" then
    scope = "global"
  end
  if letter == "s" then
    return "season:" .. middle .. ":" .. scope
  elseif letter == "d" then
    return "daily:" .. ctx.day .. ":" .. scope
  elseif letter == "w" then
    return "weekly:" .. ctx.week .. ":" .. scope
  elseif letter == "m" then
    return "monthly:" .. string.sub(ctx.day, 1, 7) .. ":" .. scope
  end
  return "alltime:all:" .. scope
end

local function record_board(rec, board)
  if not rec.seen[board] then
    rec.seen[board] = true
    rec.order[#rec.order + 1] = board
  end
end

-- The record's fields: r, u, q, qr; b[board] = points, ub[board] = rule; order: its
-- boards in the order written. raw false: no record.
local function decode_record(raw)
  local rec = {b = {}, ub = {}, order = {}, seen = {}}
  if not raw then
    return rec
  end
  local p1 = string.find(raw, "|", 1, true)
  local p2 = string.find(raw, "|", p1 + 1, true)
  local p3 = string.find(raw, "|", p2 + 1, true)
  local ctx = {
    day = string.sub(raw, 1, p1 - 1), week = string.sub(raw, p1 + 1, p2 - 1),
    region = string.sub(raw, p2 + 1, p3 - 1),
  }
  local points = nil
  for part in string.gmatch(string.sub(raw, p3 + 1), "[^;]+") do
    local eq = string.find(part, "=", 1, true)
    local name, value = part, nil
    if eq then
      name, value = string.sub(part, 1, eq - 1), string.sub(part, eq + 1)
    end
    if name == "r" then
      rec.r = from_base36(value)
    elseif name == "Q" then
      rec.qr = from_base36(value)
    elseif name == "u" then
      rec.u = value
    elseif name == "q" then
      rec.q = value
    elseif string.sub(name, 1, 1) == "^" then
      local board = expand(string.sub(name, 2), ctx)
      record_board(rec, board)
      rec.ub[board] = value
    else
      if value then
        points = from_base36(value)
      end
      local board = expand(name, ctx)
      record_board(rec, board)
      rec.b[board] = points
    end
  end
  return rec
end

-- ctx: "<day>|<week>|<region>" of the event writing it; short_of[board] = the
-- board's name relative to that context (a full id where none is shorter). Boards
-- go in the order they entered the record (speed/rebuild.py keeps the same order;
-- sorting with a Lua comparator cost Redis CPU for nothing).
local function encode_record(rec, ctx, short_of)
  local parts = {"r=" .. base36(rec.r)}
  if rec.u then
    parts[#parts + 1] = "u=" .. rec.u
  end
  if rec.q then
    parts[#parts + 1] = "q=" .. rec.q
  end
  if rec.qr then
    parts[#parts + 1] = "Q=" .. base36(rec.qr)
  end
  local previous = nil
  for _, board in ipairs(rec.order) do
    local points = rec.b[board]
    if points ~= nil then
      local name = short_of[board] or board
      local text = base36(points)
      if text == previous then
        parts[#parts + 1] = name
      else
        parts[#parts + 1] = name .. "=" .. text
      end
      previous = text
    end
  end
  for _, board in ipairs(rec.order) do
    if rec.ub[board] then
      parts[#parts + 1] = "^" .. (short_of[board] or board) .. "=" .. rec.ub[board]
    end
  end
  return ctx .. "|" .. table.concat(parts, ";")
end
