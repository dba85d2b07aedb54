-- live_window.lua: one partition's changed players around a place in display order,
-- read atomically.
--
-- KEYS: base hash, position counter, chz, chs
-- ARGV: forward start bound, forward limit, backward start bound, backward limit,
--       chs min bound, chs max bound (ZRANGEBYLEX syntax: "-", "+", "[x", "(x");
--       a limit of 0 skips that read
-- Returns {base generation, position, |chz|, |chs|, chz forward members,
--          chz backward members (nearest first), chs members in [min, max]}
local base = redis.call("HGET", KEYS[1], "g") or "0"
local position = redis.call("GET", KEYS[2]) or "0"
local forward, backward, snap = {}, {}, {}
local forward_limit = tonumber(ARGV[2])
local backward_limit = tonumber(ARGV[4])
if forward_limit > 0 then
  forward = redis.call("ZRANGEBYLEX", KEYS[3], ARGV[1], "+", "LIMIT", 0, forward_limit)
end
if backward_limit > 0 then
  backward = redis.call("ZREVRANGEBYLEX", KEYS[3], ARGV[3], "-", "LIMIT", 0, backward_limit)
end
if ARGV[5] ~= "" then
  snap = redis.call("ZRANGEBYLEX", KEYS[4], ARGV[5], ARGV[6])
end
return {
  base, position, redis.call("ZCARD", KEYS[3]), redis.call("ZCARD", KEYS[4]),
  forward, backward, snap,
}
