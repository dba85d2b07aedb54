-- rebase_partition.lua: move one partition's changed-sets and Fenwick trees onto a newly
-- published generation, atomically (build aside, then switch in one step).
--
-- KEYS[1] base hash (g = generation number, pos = its boundary on this partition)
-- KEYS[2] partition log stream     KEYS[3] landed position
-- KEYS[4] flags hash (playerId -> "shadow"): shadowed players stay out of chz and the
--         Fenwick tree; one the generation still holds gets its chb bit (hidden)
-- KEYS[5] position counter (the closed record epoch's highest position)
-- then per board (8 keys each, from KEYS[6]): totals, chz, chb, fw, bk, bk-next, cnt-next,
--         chc (lib/changed_counts.lua)
-- ARGV: generation number, boundary position, nBoards, snapshot JSON
--       {"<board>": {"<playerId>": [score, achievedMs | null, local row] | null}}
--       for the players changed after the boundary: their score in the new
--       generation and their row among the partition's rows of its segment
--       (speed/baserows.py), then the nBoards board ids.
--       Members on first_achieved boards carry the time (see apply_event.lua).
--       drop JSON {"<board>": [playerId, ...]}: players on the new generation's
--       segment (with versions) whose totals may leave Redis.
--       drop_records, slice, wall_s, lifetime: the record epochs' roll
--       (lib/epochs.lua; speed/scripts.py REBASE_PARTITION).
--
-- Players whose last change is at or before the boundary leave the changed-sets (the
-- generation now holds their score); those changed after it stay, with the bit of
-- their row in the new generation set in chb. Only deltas stay in Redis: the totals
-- of the players in drop leave too unless they changed after the boundary or are
-- shadowed (apply_event.lua and the readers then take score and version from the
-- generation). The Fenwick tree is
-- the generation's per-bucket counts of this partition, moved by the same players.
-- Returns {"ok", "<n>|<epochs that left, comma separated>"} | {"stale", why} |
--         {"retry", json [[board, player], ...]}
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
local gen = tonumber(ARGV[ARG.generation])
local bpos = tonumber(ARGV[ARG.boundary])
local n = tonumber(ARGV[ARG.n_boards])
local snap = cjson.decode(ARGV[ARG.snapshot_json])
local drop = cjson.decode(ARGV[ARG.drop_json])

local current = tonumber(redis.call("HGET", KEYS[KEY.base], "g") or "0")
if current >= gen then
  return {"stale", "base already at g" .. current}
end
-- The tail after the boundary must still be in the log to know who changed.
local landed = tonumber(redis.call("GET", KEYS[KEY.landed]) or "0")
if landed > bpos then
  return {"stale", "log already trimmed past the boundary"}
end

local index = {}
for i = 1, n do
  index[ARGV[ARG_REST + i - 1]] = KEY_GROUP.start + (i - 1) * KEY_GROUP.size
end

local tail = {}
local missing = {}
local entries = redis.call("XRANGE", KEYS[KEY.log], string.format("%d-0", bpos + 1), "+")
for _, entry in ipairs(entries) do
  local record = cjson.decode(entry[2][2])
  local player = record.event.playerId
  -- result.items: [board, total, version(, status)] per board; a record written
  -- before them has result.boards, objects (serving/log_records.py).
  local items = record.result.items
  local arrays = type(items) == "table" and items[1] ~= nil
  if not arrays then
    items = record.result.boards
  end
  if type(items) == "table" then
    for _, item in ipairs(items) do
      local board, status = item.board, item.status
      if arrays then
        board, status = item[1], item[4]
      end
      -- A board that held the event for late review did not change: skip it (a
      -- closed board may have left Redis altogether, see speed/closed.py).
      local held = (status or record.status) == "late-review"
      if held then
        board = nil
      end
      if board then
        tail[board] = tail[board] or {}
        tail[board][player] = true
        local known = snap[board]
        if index[board] == nil or known == nil or known[player] == nil then
          missing[#missing + 1] = {board, player}
        end
      end
    end
  end
end
if #missing > 0 then
  return {"retry", cjson.encode(missing)}
end

--#include members

--#include epochs

--#include changed_counts

local shadowed = {}
local flags = redis.call("HGETALL", KEYS[KEY.flags])
for i = 1, #flags, 2 do
  if flags[i + 1] == "shadow" then
    shadowed[flags[i]] = true
  end
end

local rebased = 0
for i = 1, n do
  local board = ARGV[ARG_REST + i - 1]
  local k = index[board]
  local totals, chz = KEYS[k + KEY_GROUP.totals], KEYS[k + KEY_GROUP.chz]
  local chb, fw = KEYS[k + KEY_GROUP.chb], KEYS[k + KEY_GROUP.fw]
  local bk, bk_next = KEYS[k + KEY_GROUP.bk], KEYS[k + KEY_GROUP.bk_next]
  local cnt_next = KEYS[k + KEY_GROUP.cnt_next]
  local chc = KEYS[k + KEY_GROUP.chc]

  local lowers = {}
  local raw = redis.call("ZRANGE", bk_next, 0, -1, "WITHSCORES")
  for j = 2, #raw, 2 do
    lowers[#lowers + 1] = tonumber(raw[j])
  end
  local size = math.max(1, #lowers)
  local counts = {}
  local packed = redis.call("GET", cnt_next)
  for j = 1, size do
    counts[j] = 0
    if packed and #packed >= j * 4 then
      counts[j] = struct.unpack(">i4", packed, (j - 1) * 4 + 1)
    end
  end
  -- The bucket of a score among the next generation's bounds, read whole above:
  -- not the scripts' bucket_of on bk (on purpose: every changed player is looked up).
  local function bucket(score)
    local lo, hi, found = 1, #lowers, 1
    while lo <= hi do
      local mid = math.floor((lo + hi) / 2)
      if lowers[mid] <= score then
        found = mid
        lo = mid + 1
      else
        hi = mid - 1
      end
    end
    return found
  end

  redis.call("DEL", chz, chb, chc)
  local live_members, snap_rows = {}, {}
  for player in pairs(tail[board] or {}) do
    local cur = redis.call("HGET", totals, player)
    if cur then
      local live, _, achieved = parse_total(cur, "|")
      if not shadowed[player] then
        live_members[#live_members + 1] = member_of(live, achieved, player)
        counts[bucket(live)] = counts[bucket(live)] + 1
      end
      local old = snap[board][player]
      if old ~= cjson.null then
        snap_rows[#snap_rows + 1] = old[3]
        counts[bucket(old[1])] = counts[bucket(old[1])] - 1
      end
      rebased = rebased + 1
    end
  end
  -- Shadowed after the generation was computed (so it holds them) and not changed
  -- since: hide their base rows.
  for player in pairs(shadowed) do
    local known = snap[board]
    local old = known and known[player]
    if old ~= nil and old ~= cjson.null and not (tail[board] or {})[player] then
      snap_rows[#snap_rows + 1] = old[3]
      counts[bucket(old[1])] = counts[bucket(old[1])] - 1
    end
  end
  -- ZADD in chunks: Lua's unpack has a limited stack.
  local function add_all(key, members)
    for first = 1, #members, 500 do
      local args = {}
      for j = first, math.min(#members, first + 499) do
        args[#args + 1] = 0
        args[#args + 1] = members[j]
      end
      redis.call("ZADD", key, unpack(args))
    end
  end
  add_all(chz, live_members)
  -- Unchanged since the boundary: the generation now holds score and version.
  local gone = {}
  local changed = tail[board] or {}
  local listed = drop[board]
  if type(listed) == "table" then
    for _, player in ipairs(listed) do
      if not changed[player] and not shadowed[player] then
        gone[#gone + 1] = player
      end
    end
  end
  for first = 1, #gone, 500 do
    redis.call("HDEL", totals, unpack(gone, first, math.min(#gone, first + 499)))
  end
  for first = 1, #snap_rows, 500 do
    set_changed_rows(chb, chc, {unpack(snap_rows, first, math.min(#snap_rows, first + 499))})
  end

  -- Linear-time Fenwick build from the counts (a whole new tree: not fenwick_add's
  -- point updates, on purpose), written as one big-endian i32 string.
  local tree = {}
  for j = 1, size do
    tree[j] = counts[j]
  end
  for j = 1, size do
    local parent = j + bit.band(j, -j)
    if parent <= size then
      tree[parent] = tree[parent] + tree[j]
    end
  end
  local parts = {}
  for j = 1, size do
    parts[j] = struct.pack(">i4", tree[j])
  end
  redis.call("SET", fw, table.concat(parts))
  if #lowers > 0 then
    redis.call("RENAME", bk_next, bk)
  else
    redis.call("DEL", bk, bk_next)
  end
  redis.call("DEL", cnt_next)
end
-- A new record epoch starts; epochs whose events are all landed in this generation
-- leave when it publishes a landed records index (serving/landed.py answers for
-- their records from now on), as do epochs older than a record lifetime. The
-- caller deletes the buckets of those that left (returned after the "|").
local drop_through = nil
if ARGV[ARG.drop_records] == "1" then
  drop_through = bpos
end
local _, gone = roll_epoch(KEYS[KEY.base], KEYS[KEY.position], ARGV[ARG.slice],
  tonumber(ARGV[ARG.wall_s]), tonumber(ARGV[ARG.lifetime]), drop_through)
redis.call("HSET", KEYS[KEY.base], "g", gen, "pos", bpos)
return {"ok", tostring(rebased) .. "|" .. table.concat(gone, ",")}
