-- flag_player.lua: shadow or restore one player on every board of its partition,
-- atomically (shadow removal: hidden from every public answer, scores kept).
--
-- KEYS[1] flags hash (playerId -> "shadow")   KEYS[2] base hash (g = base generation)
-- KEYS[3] the partition's flags version (moved here, in the same script as the flag:
--         a read's stamp can never pair the new flag state with the old version)
-- then per board (5 keys each, from KEYS[4]): totals, chz, chb, fw, bk
-- ARGV: playerId, action ("shadow" | "restore"), expected base generation number,
--       nBoards, then per board: boardId, the player's score in the base generation
--       ("" when not in it), when it reached that score (first_achieved boards; ""),
--       its row among the partition's rows of the base segment ("" when not in it),
--       its version there ("" when not in it or the segment has none)
--
-- Live reads count a player through the base generation (unless its base row's bit
-- is set in chb) and through chz. Shadow takes both away: its chz entry leaves, its
-- base row's bit goes up, the Fenwick tree loses it. Restore makes it a changed
-- player at its current total: chz gets enc(total), the bit stays, Fenwick gains it.
-- Returns {"ok", boards touched} | {"noop", ""} | {"retry", "base moved"}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local player = ARGV[ARG.player]
local action = ARGV[ARG.action]
local expected = tonumber(ARGV[ARG.expected_generation])
local n = tonumber(ARGV[ARG.n_boards])

local base_g = tonumber(redis.call("HGET", KEYS[KEY.base], "g") or "0")
if base_g ~= expected then
  return {"retry", "base moved"}
end
local flagged = redis.call("HGET", KEYS[KEY.flags], player) == "shadow"
if (action == "shadow") == flagged then
  return {"noop", ""}
end

--#include members

-- Members as apply_event.lua writes them: enc(score) [.. tenc(achievedMs)] .. id.
local function member(score, achieved)
  return member_of(score, achieved, player)
end

-- The bucket of a score and the tree's size. Not apply_event.lua's bucket_of (on
-- purpose): one lookup per board here, no memo, and the size read from the lowest
-- bucket when the score is below every bound.
local function bucket_of(bk, score)
  local hit = redis.call("ZREVRANGEBYSCORE", bk, score, "-inf", "LIMIT", 0, 1)
  local first = hit[1]
  if not first then
    first = redis.call("ZRANGE", bk, 0, 0)[1]
    if not first then
      return 1, 1
    end
    local _, size = parse_bucket(first)
    return 1, size
  end
  return parse_bucket(first)
end

local function fenwick_update(fw, bk, score, delta)
  local i, size = bucket_of(bk, score)
  local nodes = {}
  fenwick_add(nodes, i, size, delta)
  redis.call("BITFIELD", fw, unpack(fenwick_ops(nodes)))
end

--#include changed_counts

local touched = 0
for i = 1, n do
  local k = KEY_GROUP.start + (i - 1) * KEY_GROUP.size
  local totals, chz, chb = KEYS[k + KEY_GROUP.totals], KEYS[k + KEY_GROUP.chz], KEYS[k + KEY_GROUP.chb]
  local chc = KEYS[k + KEY_GROUP.chc]
  local fw, bk = KEYS[k + KEY_GROUP.fw], KEYS[k + KEY_GROUP.bk]
  local a = ARG_GROUP.start + (i - 1) * ARG_GROUP.size
  local base = tonumber(ARGV[a + ARG_GROUP.base_score])
  local base_achieved = tonumber(ARGV[a + ARG_GROUP.base_achieved_ms])
  local base_row = tonumber(ARGV[a + ARG_GROUP.base_row])
  local cur = redis.call("HGET", totals, player)
  local total = base
  local achieved = base_achieved
  if cur then
    local _
    total, _, achieved = parse_total(cur, "|")
  end
  local base_version = tonumber(ARGV[a + ARG_GROUP.base_version])
  if total ~= nil then
    touched = touched + 1
    if action == "shadow" and not cur and base_version then
      -- Unchanged since the base, so no total in Redis; the next generation leaves
      -- a shadowed player out: keep its total and version here from now on.
      local value = string.format("%d|%d", total, base_version)
      if achieved then
        value = value .. "|" .. string.format("%d", achieved)
      end
      redis.call("HSET", totals, player, value)
    end
    if action == "shadow" then
      if redis.call("ZREM", chz, member(total, achieved)) == 1 then
        fenwick_update(fw, bk, total, -1)
      elseif base ~= nil then
        -- Unchanged since the base: counted through the base row, now hidden.
        set_changed_rows(chb, chc, {base_row})
        fenwick_update(fw, bk, base, -1)
      end
    else
      redis.call("ZADD", chz, 0, member(total, achieved))
      if base ~= nil then
        set_changed_rows(chb, chc, {base_row})
      end
      fenwick_update(fw, bk, total, 1)
    end
  end
end
if action == "shadow" then
  redis.call("HSET", KEYS[KEY.flags], player, "shadow")
else
  redis.call("HDEL", KEYS[KEY.flags], player)
end
redis.call("INCR", KEYS[KEY.flags_version])
return {"ok", tostring(touched)}
