-- live_window.lua: one partition's changed players around a place in display order,
-- read atomically.
--
-- KEYS: base hash, position counter, chz, chs
-- ARGV: forward start bound, forward limit, backward start bound, backward limit,
--       chs min bound, chs max bound (ZRANGEBYLEX syntax: "-", "+", "[x", "(x");
--       a limit of 0 skips that read
-- Returns {base generation, position, |chz|, |chs|, chz forward members,
--          chz backward members (nearest first), chs members in [min, max]}
-- Offsets: declared in speed/scripts.py (tests/unit/test_script_interfaces.py checks).
local KEY = {base = 1, position = 2, chz = 3, chs = 4}
local ARG = {
  forward_start = 1, forward_limit = 2, backward_start = 3, backward_limit = 4,
  snapshot_min = 5, snapshot_max = 6,
}
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
if ARGV[ARG.snapshot_min] ~= "" then
  snap = redis.call("ZRANGEBYLEX", KEYS[KEY.chs], ARGV[ARG.snapshot_min], ARGV[ARG.snapshot_max])
end
return {
  base, position, redis.call("ZCARD", KEYS[KEY.chz]), redis.call("ZCARD", KEYS[KEY.chs]),
  forward, backward, snap,
}
