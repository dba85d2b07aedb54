-- approx_table.lua: one partition's whole Fenwick tree with the base generation and
-- log position it is exact for, read atomically (the API sums every partition's
-- counts into one histogram per board and reuses it while the board's stamp holds,
-- so an approximate rank then needs no histogram read at all, api/approx.py).
--
-- KEYS: Fenwick tree (i32 big-endian per slot, slot i at byte 4 * (i - 1); missing
--       trailing slots are 0), base hash, position counter, flags version
-- Returns {base generation, position, the tree's bytes, flags version}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
return {
  redis.call("HGET", KEYS[KEY.base], "g") or "0",
  redis.call("GET", KEYS[KEY.position]) or "0",
  redis.call("GET", KEYS[KEY.fw]) or "",
  redis.call("GET", KEYS[KEY.flags_version]) or "0",
}
