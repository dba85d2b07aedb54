-- live_dense.lua: one partition's whole changed-set of a board, read atomically (the
-- dense live rank's per-partition part, cached by the API per position).
--
-- KEYS: base hash, position counter, chz, chb
-- Returns {base generation, position, every chz member (the live entries of the
--          changed players, display order), the chb bitmap ("" when absent)}
-- The caller decodes the live scores and the base rows' scores and counts distinct
-- values from them (speed/live.py DenseChanges); O(changed players of the
-- partition), done once per partition and log position, not per read.
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local base = redis.call("HGET", KEYS[KEY.base], "g") or "0"
local position = redis.call("GET", KEYS[KEY.position]) or "0"
local live = redis.call("ZRANGE", KEYS[KEY.chz], 0, -1)
local rows = redis.call("GET", KEYS[KEY.chb]) or ""
return {base, position, live, rows}
