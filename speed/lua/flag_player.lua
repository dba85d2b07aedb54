-- flag_player.lua: shadow or restore one player on every board of its partition,
-- atomically (shadow removal: hidden from every public answer, scores kept).
--
-- KEYS[1] flags hash (playerId -> "shadow")   KEYS[2] base hash (g = base generation)
-- then per board (5 keys each, from KEYS[3]): totals, chz, chs, fw, bk
-- ARGV: playerId, action ("shadow" | "restore"), expected base generation number,
--       nBoards, then per board: boardId, the player's score in the base generation
--       ("" when not in it), when it reached that score (first_achieved boards; "")
--
-- Live reads count a player through the base generation (unless its base entry is in
-- chs) and through chz. Shadow takes both away: its chz entry leaves, its base entry
-- goes to chs, the Fenwick tree loses it. Restore makes it a changed player at its
-- current total: chz gets enc(total), chs keeps enc(base), Fenwick gains it.
-- Returns {"ok", boards touched} | {"noop", ""} | {"retry", "base moved"}
local player = ARGV[1]
local action = ARGV[2]
local expected = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local SCORE_OFFSET = 4503599627370496

local base_g = tonumber(redis.call("HGET", KEYS[2], "g") or "0")
if base_g ~= expected then
  return {"retry", "base moved"}
end
local flagged = redis.call("HGET", KEYS[1], player) == "shadow"
if (action == "shadow") == flagged then
  return {"noop", ""}
end

-- Members as apply_event.lua writes them: enc(score) [.. tenc(achievedMs)] .. id.
local function member(score, achieved)
  local m = struct.pack(">I8", SCORE_OFFSET - score)
  if achieved then
    m = m .. struct.pack(">I8", SCORE_OFFSET + achieved)
  end
  return m .. player
end

local function bucket_of(bk, score)
  local hit = redis.call("ZREVRANGEBYSCORE", bk, score, "-inf", "LIMIT", 0, 1)
  local first = hit[1]
  if not first then
    first = redis.call("ZRANGE", bk, 0, 0)[1]
    if not first then
      return 1, 1
    end
    local slash = string.find(first, "/", 1, true)
    return 1, tonumber(string.sub(first, slash + 1))
  end
  local slash = string.find(first, "/", 1, true)
  return tonumber(string.sub(first, 1, slash - 1)), tonumber(string.sub(first, slash + 1))
end

local function fenwick_add(fw, bk, score, delta)
  local i, size = bucket_of(bk, score)
  local ops = {}
  while i <= size do
    ops[#ops + 1] = "INCRBY"
    ops[#ops + 1] = "i32"
    ops[#ops + 1] = "#" .. (i - 1)
    ops[#ops + 1] = delta
    i = i + bit.band(i, -i)
  end
  redis.call("BITFIELD", fw, unpack(ops))
end

local touched = 0
for i = 1, n do
  local k = 3 + (i - 1) * 5
  local totals, chz, chs, fw, bk = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local base = tonumber(ARGV[4 + (i - 1) * 3 + 2])
  local base_achieved = tonumber(ARGV[4 + (i - 1) * 3 + 3])
  local cur = redis.call("HGET", totals, player)
  local total = base
  local achieved = base_achieved
  if cur then
    local sep = string.find(cur, "|", 1, true)
    total = tonumber(string.sub(cur, 1, sep - 1))
    local sep2 = string.find(cur, "|", sep + 1, true)
    achieved = sep2 and tonumber(string.sub(cur, sep2 + 1))
  end
  if total ~= nil then
    touched = touched + 1
    if action == "shadow" then
      if redis.call("ZREM", chz, member(total, achieved)) == 1 then
        fenwick_add(fw, bk, total, -1)
      elseif base ~= nil then
        -- Unchanged since the base: counted through the base row, now hidden.
        redis.call("ZADD", chs, 0, member(base, base_achieved))
        fenwick_add(fw, bk, base, -1)
      end
    else
      redis.call("ZADD", chz, 0, member(total, achieved))
      if base ~= nil then
        redis.call("ZADD", chs, 0, member(base, base_achieved))
      end
      fenwick_add(fw, bk, total, 1)
    end
  end
end
if action == "shadow" then
  redis.call("HSET", KEYS[1], player, "shadow")
else
  redis.call("HDEL", KEYS[1], player)
end
return {"ok", tostring(touched)}
