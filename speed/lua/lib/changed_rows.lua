-- The set bits of bitmap key chb among rows [first, stop), ascending (a changed-set's
-- snapshot side): shared by live_window.lua and live_nearby.lua.
local function changed_rows(chb, first, stop)
  local snap = {}
  if stop <= first then
    return snap
  end
  -- Bit i of the bitmap is bit (7 - i % 8) of byte i // 8 (big-endian, as SETBIT).
  local from = math.floor(first / 8)
  local bytes = redis.call("GETRANGE", chb, from, math.floor((stop - 1) / 8))
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
  return snap
end
