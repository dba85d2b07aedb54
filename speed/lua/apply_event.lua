-- apply_event.lua: the owner transaction for one score event, atomic in Redis.
--
-- KEYS.dedupe: dedupe record        (playerId, eventId) -> "<fingerprint>|<saved result>",
--         the result kept compact (it lives for the whole retention window):
--         "<status>|<partition>|<position>|<board>,<total>,<version>[,<status>];..."
-- KEYS.contribution: contribution record  (playerId, matchId) hash: r=<revision>, b:<board>=<points>,
--         u:<board>=<rule version the points were scored under>
-- KEYS.log: partition log        stream, entry id "<position>-0", field r=<record json>
-- KEYS.position: position counter     last position handed out on this partition
-- KEYS.rate: rate-limit bucket    hash: t=<tokens>, ts=<ms>
-- KEYS.recent: recent matches       zset matchId -> occurredAt ms of the player's accepted
--         new matches (plausibility bounds; kept only when a rule has such bounds)
-- KEYS.flags: flags                hash playerId -> "shadow" (shadow removal): a shadowed
--         player's totals change, but it stays out of changed-sets and Fenwick trees
-- KEYS.quarantine: quarantine           hash "<len(playerId)>:<playerId><eventId>" -> the log
--         record of a held event (status "quarantined")
-- then per board i (6 keys each, from KEYS[9]):
--   totals   hash playerId -> "total|version" (the authoritative live total), on
--            first_achieved boards "total|version|achievedMs"
--   chz      changed-set, live side: lex zset of enc(live total) .. playerId for every
--            player changed since the partition's base generation
--   chs      changed-set, snapshot side: enc(base snapshot score) .. playerId for the
--            changed players that are in the base generation
--   fw       Fenwick tree of player counts per bucket (BITFIELD i32, slot #(i-1))
--   bk       bucket boundaries: zset member = bucket index, score = lower bound
--   best     best-of zset matchId -> points (only used by aggregation "max")
-- enc(s) is 8 bytes big-endian of 2^52 - s, so byte order of members is display
-- order: score descending, then player id ascending (memcmp order of UTF-8). On
-- first_achieved boards members are enc(s) .. tenc(achievedMs) .. playerId, tenc(t)
-- being 8 bytes big-endian of 2^52 + t: the earlier achiever first among equal scores.
--
-- ARGV: playerId, eventId, matchId, revision, points (the record's; informational),
--       fingerprint, nowMs, retentionSeconds, rateCapacity (0 = off), rateRefillMs,
--       partition, eventJson (normalized event, embedded verbatim in the log record),
--       isCorrection (1/0), nBoards, occurredMs, minGapMs (event time a new match
--       needs since the player's previous one; 0 = no bound), maxPerHour (new
--       matches per hour of event time; 0 = no bound), mode ("apply", or "release":
--       apply a quarantined event as of its acceptance, nowMs = its receivedAtMs),
--       then per board: boardId, aggregation, cutoffMs (0 = never), feeds (1/0),
--       points (the contribution under the board's rule), rule version, quarantine
--       threshold (points above it hold the event as "quarantined"; 0 = none);
--       aggregation is "sum" or "max", plus ":fa:<occurredMs>" on first_achieved
--       boards (the event's time, recorded when it changes the player's total)
--
-- Returns {"ok", resultJson} | {"duplicate", resultJson} | {"conflict", ""} |
--         {"rate_limited", retryAfterSeconds} | {"retry", missingBoardId} |
--         {"implausible", detail} | {"superseded", ""} (release of an event a later
--         revision replaced) | {"noop", why} (release of an event not held)
-- Offsets: declared in speed/scripts.py (tests/unit/test_script_interfaces.py checks).
local KEY = {
  dedupe = 1, contribution = 2, log = 3, position = 4, rate = 5, recent = 6, flags = 7,
  quarantine = 8,
}
local KEY_GROUP = {start = 9, size = 6, totals = 0, chz = 1, chs = 2, fw = 3, bk = 4, best = 5}
local ARG = {
  player = 1, event_id = 2, match_id = 3, revision = 4, points = 5, fingerprint = 6,
  now_ms = 7, retention = 8, rate_capacity = 9, rate_refill_ms = 10, partition = 11,
  event_json = 12, is_correction = 13, n_boards = 14, occurred_ms = 15, min_gap_ms = 16,
  max_per_hour = 17, mode = 18,
}
local ARG_GROUP = {
  start = 19, size = 7, board = 0, aggregation = 1, cutoff_ms = 2, feeds = 3, points = 4,
  rule = 5, threshold = 6,
}
local player = ARGV[ARG.player]
local event_id = ARGV[ARG.event_id]
local match_id = ARGV[ARG.match_id]
local revision = tonumber(ARGV[ARG.revision])
local fingerprint = ARGV[ARG.fingerprint]
local now_ms = tonumber(ARGV[ARG.now_ms])
local retention = tonumber(ARGV[ARG.retention])
local rate_capacity = tonumber(ARGV[ARG.rate_capacity])
local rate_refill_ms = tonumber(ARGV[ARG.rate_refill_ms])
local partition = tonumber(ARGV[ARG.partition])
local event_json = ARGV[ARG.event_json]
local is_correction = ARGV[ARG.is_correction] == "1"
local n_boards = tonumber(ARGV[ARG.n_boards])
local occurred_ms = tonumber(ARGV[ARG.occurred_ms])
local min_gap_ms = tonumber(ARGV[ARG.min_gap_ms])
local max_per_hour = tonumber(ARGV[ARG.max_per_hour])
local mode = ARGV[ARG.mode]
local HOUR_MS = 3600000
local held_field = string.len(player) .. ":" .. player .. event_id

-- (a) dedupe: same identity and content returns the saved result unchanged.
local saved = redis.call("GET", KEYS[KEY.dedupe])
if mode == "release" then
  -- Only a held event is released, and only once.
  if redis.call("HEXISTS", KEYS[KEY.quarantine], held_field) == 0 then
    return {"noop", "not held in quarantine"}
  end
elseif saved then
  local sep = string.find(saved, "|", 1, true)
  if string.sub(saved, 1, sep - 1) == fingerprint then
    return {"duplicate", string.sub(saved, sep + 1)}
  end
  return {"conflict", ""}
end

local boards = {}
local given = {}
for i = 1, n_boards do
  local a = ARG_GROUP.start + (i - 1) * ARG_GROUP.size
  local k = KEY_GROUP.start + (i - 1) * KEY_GROUP.size
  local aggregation = ARGV[a + ARG_GROUP.aggregation]
  local agg, fa_ms = string.match(aggregation, "^(%a+):fa:(%-?%d+)$")
  local b = {
    id = ARGV[a + ARG_GROUP.board], agg = agg or aggregation, fa = fa_ms and tonumber(fa_ms),
    cutoff = tonumber(ARGV[a + ARG_GROUP.cutoff_ms]),
    feeds = ARGV[a + ARG_GROUP.feeds] == "1", points = tonumber(ARGV[a + ARG_GROUP.points]),
    rule = ARGV[a + ARG_GROUP.rule], threshold = tonumber(ARGV[a + ARG_GROUP.threshold]),
    totals = KEYS[k + KEY_GROUP.totals], chz = KEYS[k + KEY_GROUP.chz],
    chs = KEYS[k + KEY_GROUP.chs], fw = KEYS[k + KEY_GROUP.fw],
    bk = KEYS[k + KEY_GROUP.bk], best = KEYS[k + KEY_GROUP.best],
  }
  boards[i] = b
  given[b.id] = true
end

-- (b) contribution: a revision not above the stored one changes nothing.
local stored = redis.call("HGETALL", KEYS[KEY.contribution])
local stored_rev = 0
local held_id = nil
local held_before = 0
local applied = {}
for i = 1, #stored, 2 do
  local f = stored[i]
  if f == "r" then
    stored_rev = tonumber(stored[i + 1])
  elseif f == "q" then
    held_id = stored[i + 1]
  elseif f == "qr" then
    held_before = tonumber(stored[i + 1])
  elseif string.sub(f, 1, 2) == "b:" then
    local board = string.sub(f, 3)
    applied[board] = tonumber(stored[i + 1])
    -- A correction that moves a match out of a board must touch that board's keys:
    -- the caller resolves this and calls again with the board included.
    if not given[board] then
      return {"retry", board}
    end
  end
end
local is_new_match = #stored == 0
if mode == "release" then
  -- As if accepted then: only while no later revision replaced it; the revision it
  -- is compared with is the one stored before it was held.
  if held_id ~= event_id or stored_rev ~= revision then
    redis.call("HDEL", KEYS[KEY.quarantine], held_field)
    return {"superseded", ""}
  end
  stored_rev = held_before
  is_new_match = false
end

-- Plausibility bounds of the rules (conf/rules.py) that need the player's history:
-- rejected outright, nothing applied, no token spent.
if mode == "apply" and is_new_match and max_per_hour > 0 then
  local recent = redis.call("ZCOUNT", KEYS[KEY.recent], "(" .. (occurred_ms - HOUR_MS), occurred_ms)
  if recent >= max_per_hour then
    return {"implausible", string.format(
      "max_matches_per_hour: %d accepted matches in the hour before this one; at most %d",
      recent, max_per_hour)}
  end
end
if mode == "apply" and is_new_match and min_gap_ms > 0 then
  local prev = redis.call("ZREVRANGEBYSCORE", KEYS[KEY.recent], occurred_ms, "-inf",
    "WITHSCORES", "LIMIT", 0, 1)
  if #prev > 0 and occurred_ms - tonumber(prev[2]) < min_gap_ms then
    return {"implausible", string.format(
      "max_points_per_minute: %d s since the previous match %s; these points need %d s",
      math.floor((occurred_ms - tonumber(prev[2])) / 1000), prev[1],
      math.ceil(min_gap_ms / 1000))}
  end
end

-- Per-player token bucket for new match results only: redeliveries (caught above)
-- and corrections of a stored match never spend tokens; a "correction" of a match
-- never seen is a new match (API.md), else it would bypass the limit.
-- "capacity/refillSeconds" (API.md) is a burst of capacity, then ONE token every
-- refillSeconds (5/60: 5 at once, then 1 a minute).
if mode == "apply" and rate_capacity > 0 and is_new_match then
  local bucket = redis.call("HMGET", KEYS[KEY.rate], "t", "ts")
  local tokens = tonumber(bucket[1]) or rate_capacity
  local last = tonumber(bucket[2]) or now_ms
  local per_ms = 1 / rate_refill_ms
  tokens = math.min(rate_capacity, tokens + math.max(0, now_ms - last) * per_ms)
  if tokens < 1 then
    return {"rate_limited", tostring(math.ceil((1 - tokens) / per_ms / 1000))}
  end
  redis.call("HSET", KEYS[KEY.rate], "t", tostring(tokens - 1), "ts", tostring(now_ms))
  -- A bucket idle long enough to refill completely equals a missing one.
  redis.call("PEXPIRE", KEYS[KEY.rate], rate_capacity * rate_refill_ms)
end

local position = redis.call("INCR", KEYS[KEY.position])

-- total, version, achievedMs (nil off first_achieved boards) of the player.
local function read_total(b)
  local cur = redis.call("HGET", b.totals, player)
  if not cur then
    return nil, 0, nil
  end
  local sep = string.find(cur, "|", 1, true)
  local sep2 = string.find(cur, "|", sep + 1, true)
  if sep2 then
    return tonumber(string.sub(cur, 1, sep - 1)),
      tonumber(string.sub(cur, sep + 1, sep2 - 1)), tonumber(string.sub(cur, sep2 + 1))
  end
  return tonumber(string.sub(cur, 1, sep - 1)), tonumber(string.sub(cur, sep + 1)), nil
end

local SCORE_OFFSET = 4503599627370496 -- 2^52: scores stay within +-2^52

local function enc(score)
  return struct.pack(">I8", SCORE_OFFSET - score)
end

local function member(b, score, achieved)
  if b.fa then
    return enc(score) .. struct.pack(">I8", SCORE_OFFSET + achieved) .. player
  end
  return enc(score) .. player
end

-- Bucket holding a score: the one with the largest lower bound <= score; scores below
-- the lowest bound (or a board without boundaries yet) fall in bucket 1. Members are
-- "<index>/<bucket count>", so one call gives the index, the tree size and the lower.
local function parse_bucket(member)
  local slash = string.find(member, "/", 1, true)
  return tonumber(string.sub(member, 1, slash - 1)), tonumber(string.sub(member, slash + 1))
end

local function bucket_of(b, score)
  local hit = redis.call("ZREVRANGEBYSCORE", b.bk, score, "-inf", "WITHSCORES", "LIMIT", 0, 1)
  if #hit == 0 then
    local first = redis.call("ZRANGE", b.bk, 0, 0)
    if #first == 0 then
      return 1, 1, nil
    end
    local _, size = parse_bucket(first[1])
    return 1, size, nil
  end
  local index, size = parse_bucket(hit[1])
  return index, size, tonumber(hit[2])
end

-- One BITFIELD call applies both Fenwick point updates (old bucket -1, new +1).
local function fenwick_move(b, from, to, size)
  local ops = {}
  local function add(i, delta)
    while i <= size do
      ops[#ops + 1] = "INCRBY"
      ops[#ops + 1] = "i32"
      ops[#ops + 1] = "#" .. (i - 1)
      ops[#ops + 1] = delta
      i = i + bit.band(i, -i)
    end
  end
  if from then
    add(from, -1)
  end
  add(to, 1)
  redis.call("BITFIELD", b.fw, unpack(ops))
end

-- Moves the player in the changed-set and the Fenwick tree from old (nil when new to
-- the board) to new. A player absent from chz has not changed since the base, so its
-- old total is its score in the base generation: that goes to chs.
local function track(b, old, old_achieved, new, new_achieved)
  if old then
    local member_old = member(b, old, old_achieved)
    if redis.call("ZREM", b.chz, member_old) == 0 then
      redis.call("ZADD", b.chs, 0, member_old)
    end
  end
  redis.call("ZADD", b.chz, 0, member(b, new, new_achieved))
  local to, size, lower = bucket_of(b, new)
  local from = nil
  if old then
    -- A rise that stays above the new bucket's lower bound stays in that bucket.
    if old <= new and (lower == nil or old >= lower) then
      from = to
    else
      from = bucket_of(b, old)
    end
  end
  if from ~= to then
    fenwick_move(b, from, to, size)
  end
end

-- A shadowed player is hidden from every public answer: restore re-adds it at its
-- total then (speed/lua/flag_player.lua).
local shadowed = redis.call("HGET", KEYS[KEY.flags], player) == "shadow"

local function write_total(b, old, old_achieved, total, version)
  local achieved = nil
  if b.fa then
    -- The player reached this total now unless it is the total it already had.
    achieved = old_achieved
    if old == nil or old ~= total or achieved == nil then
      achieved = b.fa
    end
    redis.call("HSET", b.totals, player, string.format("%d|%d|%d", total, version, achieved))
  else
    redis.call("HSET", b.totals, player, string.format("%d|%d", total, version))
  end
  if shadowed then
    -- Hidden from the histogram, but the board has one, as for any player on it
    -- (an INCRBY of 0 creates the tree if missing and changes nothing).
    redis.call("BITFIELD", b.fw, "INCRBY", "i32", "#0", 0)
    return
  end
  if b.fa then
    track(b, old, old_achieved, total, achieved)
  else
    track(b, old, nil, total, nil)
  end
end

-- Largest contribution left in a best-of board, 0 when none.
local function best_of(b)
  local top = redis.call("ZREVRANGE", b.best, 0, 0, "WITHSCORES")
  if #top == 0 then
    return 0
  end
  return tonumber(top[2])
end

local status
local items = {}
local any_applied = false
local any_late = false

-- Quarantine: a contribution above its board's threshold (the historical p99.99 of
-- the event's cohort, published with the generation) holds the whole event:
-- recorded and durable, applied to nothing until an admin releases it.
local held = false
if mode == "apply" and not (stored_rev > 0 and revision <= stored_rev) then
  for _, b in ipairs(boards) do
    local late = b.cutoff > 0 and now_ms > b.cutoff
    if b.feeds and not late and b.threshold > 0 and b.points > b.threshold then
      held = true
    end
  end
end

if held then
  -- No board items: nothing was applied to any board (the log, the rebase and the
  -- rebuild then see no board touched by this record).
  status = "quarantined"
  -- The match's revision is taken (a resend is superseded); its contributions stay
  -- those of the revision before, remembered for the release.
  redis.call("HSET", KEYS[KEY.contribution], "r", revision, "q", event_id, "qr", stored_rev)
elseif stored_rev > 0 and revision <= stored_rev then
  -- Superseded: report the current totals of the boards this event would feed.
  status = "superseded"
  for _, b in ipairs(boards) do
    if b.feeds then
      local total, version = read_total(b)
      if total then
        items[#items + 1] = {board = b.id, total = total, version = version}
      end
    end
  end
else
  -- (c) delta = new - stored contribution, on every board the event feeds; a board
  -- the previous revision fed and this one does not gets its contribution removed.
  -- The contribution record's fields are written in one HSET, in board order, then r.
  local contribution = {}
  for _, b in ipairs(boards) do
    local late = b.cutoff > 0 and now_ms > b.cutoff
    local old = applied[b.id]
    local total, version, achieved = read_total(b)
    if late and (b.feeds or old ~= nil) then
      -- (d) past a season's end + allowedLateness: recorded, not applied.
      any_late = true
      items[#items + 1] = {
        board = b.id, total = total or 0, version = version, status = "late-review",
      }
    elseif b.feeds or old ~= nil then
      local new = 0
      if b.feeds then
        new = b.points
      end
      local old_total = total
      local base = total or 0
      if b.agg == "max" then
        if b.feeds then
          redis.call("ZADD", b.best, new, match_id)
        else
          redis.call("ZREM", b.best, match_id)
        end
        redis.call("EXPIRE", b.best, retention)
        total = best_of(b)
      else
        total = base + new - (old or 0)
      end
      version = version + 1
      write_total(b, old_total, achieved, total, version)
      contribution[#contribution + 1] = "b:" .. b.id
      contribution[#contribution + 1] = new
      -- The rule version the contribution was scored under.
      contribution[#contribution + 1] = "u:" .. b.id
      contribution[#contribution + 1] = b.rule
      any_applied = true
      items[#items + 1] = {board = b.id, total = total, version = version}
    end
  end
  contribution[#contribution + 1] = "r"
  contribution[#contribution + 1] = revision
  redis.call("HSET", KEYS[KEY.contribution], unpack(contribution))
  if held_id then
    -- This revision replaces a held one: releasing that one later changes nothing.
    redis.call("HDEL", KEYS[KEY.contribution], "q", "qr")
  end
  if is_new_match and any_applied and (min_gap_ms > 0 or max_per_hour > 0) then
    -- A day of history is enough for both bounds; older matches drop out.
    redis.call("ZADD", KEYS[KEY.recent], occurred_ms, match_id)
    redis.call("ZREMRANGEBYSCORE", KEYS[KEY.recent], "-inf", "(" .. (occurred_ms - 24 * HOUR_MS))
    redis.call("EXPIRE", KEYS[KEY.recent], 2 * 24 * 3600)
  end
  if any_applied then
    status = "accepted"
  elseif any_late then
    status = "late-review"
  else
    status = "accepted"
  end
  -- A board whose outcome equals the event's carries no status of its own.
  for _, item in ipairs(items) do
    if item.status == status then
      item.status = nil
    end
  end
end
redis.call("EXPIRE", KEYS[KEY.contribution], retention)

local result = cjson.encode({
  eventId = event_id, playerId = player, status = status, boards = items,
  partition = partition, position = position,
})

-- (e) the log record carries everything the batch layer needs on its own. A release
-- is logged as "released" (the batch layer applies the held record, at its position).
local logged = status
if mode == "release" then
  logged = "released"
end
local record = string.format(
  '{"partition":%d,"position":%d,"receivedAtMs":%d,"status":"%s","event":%s,"result":%s}',
  partition, position, now_ms, logged, event_json, result)
redis.call("XADD", KEYS[KEY.log], string.format("%d-0", position), "r", record)
if held then
  redis.call("HSET", KEYS[KEY.quarantine], held_field, record)
elseif mode == "release" then
  redis.call("HDEL", KEYS[KEY.quarantine], held_field)
end

-- (f) save the result for redeliveries, compactly (board ids hold no , ; or |).
local parts = {}
for j, item in ipairs(items) do
  local part = string.format("%s,%d,%d", item.board, item.total, item.version)
  if item.status then
    part = part .. "," .. item.status
  end
  parts[j] = part
end
local compact = string.format("%s|%d|%d|%s", status, partition, position,
  table.concat(parts, ";"))
redis.call("SET", KEYS[KEY.dedupe], fingerprint .. "|" .. compact, "EX", retention)
return {"ok", compact}
