-- live_window.lua: one partition's changed players around a place in display order,
-- read atomically.
--
-- KEYS: base hash, position counter, chz, chb
-- ARGV: forward start bound, forward limit, backward start bound, backward limit
--       (ZRANGEBYLEX syntax: "-", "+", "[x", "(x"; a limit of 0 skips that read),
--       first and stop of a range [first, stop) of the partition's base rows
--       (local rows, speed/baserows.py)
-- Returns {base generation, position, |chz|, changed base rows, chz forward members,
--          chz backward members (nearest first), the changed local rows in
--          [first, stop), ascending}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local base = redis.call("HGET", KEYS[KEY.base], "g") or "0"
local position = redis.call("GET", KEYS[KEY.position]) or "0"
local forward, backward, snap = {}, {}, {}
local forward_limit = tonumber(ARGV[ARG.forward_limit])
local backward_limit = tonumber(ARGV[ARG.backward_limit])
if forward_limit > 0 then
  forward = redis.call("ZRANGEBYLEX", KEYS[KEY.chz], ARGV[ARG.forward_start], "+", "LIMIT", 0, forward_limit)
end
if backward_limit > 0 then
  backward = redis.call("ZREVRANGEBYLEX", KEYS[KEY.chz], ARGV[ARG.backward_start], "-", "LIMIT", 0, backward_limit)
end
local first = tonumber(ARGV[ARG.snapshot_first])
local stop = tonumber(ARGV[ARG.snapshot_stop])
if stop > first then
  -- Bit i of the bitmap is bit (7 - i % 8) of byte i // 8 (big-endian, as SETBIT).
  local from = math.floor(first / 8)
  local bytes = redis.call("GETRANGE", KEYS[KEY.chb], from, math.floor((stop - 1) / 8))
  for j = 1, #bytes do
    local byte = string.byte(bytes, j)
    if byte ~= 0 then
      for k = 0, 7 do
        local row = (from + j - 1) * 8 + k
        if row >= first and row < stop and bit.band(byte, bit.rshift(128, k)) ~= 0 then
          snap[#snap + 1] = row
        end
      end
    end
  end
end
return {
  base, position, redis.call("ZCARD", KEYS[KEY.chz]), redis.call("BITCOUNT", KEYS[KEY.chb]),
  forward, backward, snap,
}
