-- live_dense.lua: one partition's part of a live dense rank, read atomically.
--
-- KEYS: base hash, position counter, chz, chb
-- ARGV: encoded score enc(s), the partition's base rows above s (local count,
--       speed/baserows.py)
-- Returns {base generation, position, chz members above s (the live scores of
--          changed players above s), the changed local base rows above s, ascending}
-- The caller counts the distinct scores above s: the base generation's, less the
-- values no remaining base player holds, plus the live values above s.
-- Offsets: declared in speed/scripts.py (tests/unit/test_script_interfaces.py checks).
local KEY = {base = 1, position = 2, chz = 3, chb = 4}
local ARG = {above = 1, chb_above = 2}
local base = redis.call("HGET", KEYS[KEY.base], "g") or "0"
local position = redis.call("GET", KEYS[KEY.position]) or "0"
local live = redis.call("ZRANGEBYLEX", KEYS[KEY.chz], "-", "(" .. ARGV[ARG.above])
local rows = {}
local stop = tonumber(ARGV[ARG.chb_above])
local from = 0
while from < stop do
  local row = redis.call("BITPOS", KEYS[KEY.chb], 1, from, stop - 1, "BIT")
  if row < 0 then
    break
  end
  rows[#rows + 1] = row
  from = row + 1
end
return {base, position, live, rows}
