-- apply_event.lua: the owner transaction for a chunk of score events of ONE partition,
-- atomic in Redis. Each event gets, in order, exactly the semantics and the result it
-- would get if it were sent alone; what is shared is the work on the per-board
-- structures: read once per chunk, kept in Lua tables, written once per chunk (one
-- HSET of the totals, one ZADD/ZREM per changed-set side, one BITFIELD with the
-- Fenwick deltas summed per bucket).
--
-- Per-partition keys (KEY):
--   log          stream of accepted records, entry id "<position>-0", field r=<json>
--   position     last position handed out on this partition (gap-free counter)
--   flags        hash playerId -> "shadow" (shadow removal): a shadowed player's totals
--                change, but it stays out of changed-sets and Fenwick trees
--   quarantine   hash "<len(identity)>:<identity><eventId>" -> the log record of a held
--                event (status "quarantined")
--   base         hash g = the partition's base generation (speed/rebase.py)
-- Per board of the chunk (KEY_GROUP, one group per board of the board table):
--   totals   hash playerId -> "total|version" (the authoritative live total), on
--            first_achieved boards "total|version|achievedMs"
--   chz      changed-set, live side: lex zset of enc(live total) .. playerId for every
--            player changed since the partition's base generation
--   chb      changed-set, snapshot side: bitmap over the partition's rows of the base
--            segment (speed/baserows.py), bit L set when the partition's L-th base
--            player is changed (or shadowed): its base row leaves the live merge
--   chc      chb's set bits per block of rows (lib/changed_counts.lua)
--   fw       Fenwick tree of player counts per bucket (BITFIELD i32, slot #(i-1))
--   bk       bucket boundaries: zset member "<index>/<bucket count>", score = lower
-- Per event (EV_KEY, from the event's key_at): rate-limit bucket, recent matches,
--   then the dedupe record's bucket hash in each live record epoch, newest (the
--   current one) first (speed/records.py), field
--   EV.record_field (8-byte identity hash) -> <fingerprint prefix, 8 bytes><saved
--   result>, the result kept compact: "<status letter>|<position>|<board>,<total>,
--   <version>[,<status letter>];..." (the reply is the same compact form; a bucket
--   expires whole at ARG.record_expire_at); contribution record (playerId, matchId): the
--   field EV.contribution_field of its bucket in each live epoch likewise (moved to
--   the current one whenever touched), holding the record's fields
--   r=<revision>, b:<board>=<points>, u=<rule version the points were scored under>,
--   u:<board>=<its rule version> for a board whose rule is not u (q, qr while a
--   revision is held), encoded by encode_record (lib/records.lua, speed/records.py).
--   A record no live epoch holds may be in the base generation's landed records
--   index: the caller passes it (EV.landed_dedupe, EV.landed_contribution);
--   rate-limit bucket hash t=<tokens>, ts=<ms>; recent matches zset matchId ->
--   occurredAt ms of the player's accepted new matches (plausibility bounds; kept only
--   when a rule has such bounds). A reference to an aggregation "max" board names its
--   best-of zset matchId -> points (EV_BOARD.best: a KEYS index; 0 elsewhere).
-- enc(s), tenc(t): the member encoding of lib/members.lua (display order in bytes).
--
-- ARGV: the chunk's constants (ARG; mode is "apply", or "release": apply quarantined
-- events as of their acceptance, nowMs = their receivedAtMs; base_generation: the
-- generation the base rows refer to), then the board table
-- (ARG_GROUP per board: id, aggregation "sum" | "max", first_achieved 1/0, cutoffMs
-- (0 = never), rule version, sign: 1 on order "desc" boards, -1 on "asc" ones), then one argument per event, packed: an EV record
-- (minGapMs: event time a new match needs since the player's previous one,
-- maxPerHour: new matches per hour of event time, 0 = no bound; eventJson: the
-- normalized event, embedded verbatim in the log record) followed by its n_refs
-- EV_BOARD records (index into the board table, feeds 1/0, points under the board's
-- rule, quarantine threshold: points above it hold the event as "quarantined", 0 =
-- none; the player's local row in the base segment, -1 when not in it; the board's
-- name in the saved result; base: its "score,version[,achievedMs]" there, "" when not
-- in it: a pair without a total in Redis has not changed since the base generation
-- and starts from it).
--
-- Returns, per event in order, kind then payload (ending early after a "retry": the
-- events after it did not run): "ok", resultCompact |
--   "duplicate", resultCompact | "conflict", "" | "rate_limited", retryAfterSeconds |
--   "retry", missingBoardId (nothing happened: send it again with that board) |
--   "implausible", detail | "superseded", "" (release of an event a later revision
--   replaced) | "noop", why (release of an event not held); or, alone, "rebased",
--   the partition's base generation when it is not base_generation (nothing ran).
-- Offsets (KEY, ARG, ...): generated from speed/scripts.py, prepended by
-- speed.scripts.source (tests/unit/test_script_interfaces.py checks the names used).
-- One-letter statuses of saved results (speed/records.py STATUS_CODE).
local status_letter = {
  accepted = "a", superseded = "s", ["late-review"] = "l", quarantined = "q",
}

local now_ms = tonumber(ARGV[ARG.now_ms])
local retention = tonumber(ARGV[ARG.retention])
local rate_capacity = tonumber(ARGV[ARG.rate_capacity])
local rate_refill_ms = tonumber(ARGV[ARG.rate_refill_ms])
local partition = tonumber(ARGV[ARG.partition])
local mode = ARGV[ARG.mode]
local n_boards = tonumber(ARGV[ARG.n_boards])
local n_events = tonumber(ARGV[ARG.n_events])
local default_rule = ARGV[ARG.default_rule]
local record_expire_at = ARGV[ARG.record_expire_at]
local n_epochs = tonumber(ARGV[ARG.n_epochs])

--#include epochs

-- Base rows are positions in one generation's segments, landed records that
-- generation's index, record buckets those of the live epochs: refuse them for
-- another base or other epochs ("rebased", "<generation>|<epochs>").
local base_state = redis.call("HMGET", KEYS[KEY.base], "g", "ep", "s", "n")
local base_generation = base_state[1] or "0"
local live_epochs = base_state[2] or ""
-- No epoch yet: epoch 1 starts now (a caller that knows none names its buckets).
if live_epochs == "" and not base_state[4] then
  live_epochs = "1"
  base_state[3] = ARGV[ARG.slice]
  redis.call("HSET", KEYS[KEY.base], "ep", live_epochs, "n", 1, "s", base_state[3])
end
-- The current epoch started in an earlier wall-clock slice (or, never so, none is
-- live): a new one starts (records then expire with their epochs,
-- speed/records.py); nothing ran, the caller sends the chunk again with its
-- buckets.
if live_epochs == "" or tonumber(base_state[3] or "0") < tonumber(ARGV[ARG.slice]) then
  local ep = roll_epoch(KEYS[KEY.base], KEYS[KEY.position], ARGV[ARG.slice],
    tonumber(ARGV[ARG.wall_s]), retention, nil)
  return {"rebased", base_generation .. "|" .. ep}
end
if base_generation ~= ARGV[ARG.base_generation] or live_epochs ~= ARGV[ARG.epochs] then
  return {"rebased", base_generation .. "|" .. live_epochs}
end
local HOUR_MS = 3600000

-- The board table. Per board, the chunk's view of the players it references:
-- cur[p] = {total, version, achieved} (false: not on the board), first[p] = the
-- changed-set member p had at the chunk's start (false: none) once p was moved,
-- bucket[p] = the Fenwick bucket of p's current total once known, delta[i] = the
-- summed Fenwick change of bucket i.
local boards = {}
for i = 1, n_boards do
  local a = ARG_GROUP.start + (i - 1) * ARG_GROUP.size
  local k = KEY_GROUP.start + (i - 1) * KEY_GROUP.size
  boards[i] = {
    id = ARGV[a + ARG_GROUP.board], agg = ARGV[a + ARG_GROUP.aggregation],
    fa = ARGV[a + ARG_GROUP.first_achieved] == "1",
    cutoff = tonumber(ARGV[a + ARG_GROUP.cutoff_ms]), rule = ARGV[a + ARG_GROUP.rule],
    -- Oriented scores (conf/boards.py BoardRules): the board's totals, changed-sets,
    -- Fenwick trees and best-of zsets hold sign * score, so "higher is better" on
    -- every board; contributions are oriented when applied, totals turned back to
    -- real scores in results (sign * oriented). Contribution records keep the real
    -- points.
    sign = tonumber(ARGV[a + ARG_GROUP.sign]),
    totals = KEYS[k + KEY_GROUP.totals], chz = KEYS[k + KEY_GROUP.chz],
    chb = KEYS[k + KEY_GROUP.chb], chc = KEYS[k + KEY_GROUP.chc],
    fw = KEYS[k + KEY_GROUP.fw],
    bk = KEYS[k + KEY_GROUP.bk],
    wanted = {}, wanted_list = {}, cur = {}, in_chz = {}, first = {}, bucket = {}, row = {},
    base = {}, probed = {},
    touched = {}, touched_list = {}, delta = {}, fw_touched = false, memo = {},
  }
  -- Past its cutoff the board takes nothing from this chunk (events report its
  -- total as late-review), so its changed-set and tree are not read.
  boards[i].late = boards[i].cutoff > 0 and now_ms > boards[i].cutoff
end

local events = {}
local players = {}
local player_list = {}
local cursor = ARG_GROUP.start + n_boards * ARG_GROUP.size
-- "<" .. EV_BOARD_FORMAT repeated n times, per n: an event's references in one call.
local refs_format = {}
for e = 1, n_events do
  local packed = ARGV[cursor]
  cursor = cursor + 1
  local v = {struct.unpack("<" .. EV_FORMAT, packed)}
  local ev = {
    player = v[EV.player + 1], event_id = v[EV.event_id + 1],
    match_id = v[EV.match_id + 1], revision = v[EV.revision + 1],
    fingerprint = v[EV.fingerprint + 1], event_json = v[EV.event_json + 1],
    occurred_ms = v[EV.occurred_ms + 1], min_gap_ms = v[EV.min_gap_ms + 1],
    max_per_hour = v[EV.max_per_hour + 1], key_at = v[EV.key_at + 1],
    dedupe_field = v[EV.dedupe_field + 1],
    contribution_field = v[EV.contribution_field + 1], context = v[EV.context + 1],
    held_field = v[EV.held_field + 1],
    landed_dedupe = v[EV.landed_dedupe + 1],
    landed_contribution = v[EV.landed_contribution + 1], refs = {},
  }
  local n_refs = v[EV.n_refs + 1]
  local format = refs_format[n_refs]
  if not format then
    format = "<" .. string.rep(EV_BOARD_FORMAT, n_refs)
    refs_format[n_refs] = format
  end
  -- After the EV record's values, struct.unpack returns where the rest starts.
  local r = {struct.unpack(format, packed, v[EV.size + 1])}
  local player = ev.player
  local at = 1
  for i = 1, n_refs do
    local b = boards[r[at + EV_BOARD.board]]
    ev.refs[i] = {
      b = b, feeds = r[at + EV_BOARD.feeds] == 1, points = r[at + EV_BOARD.points],
      threshold = r[at + EV_BOARD.threshold], best = KEYS[r[at + EV_BOARD.best]],
      saved_as = r[at + EV_BOARD.saved_as],
    }
    b.row[player] = r[at + EV_BOARD.base_row]
    b.base[player] = r[at + EV_BOARD.base]
    if not b.wanted[player] then
      b.wanted[player] = true
      b.wanted_list[#b.wanted_list + 1] = player
    end
    at = at + EV_BOARD.size
  end
  if not players[player] then
    players[player] = true
    player_list[#player_list + 1] = player
  end
  ev.index = e
  events[e] = ev
end
-- The per-key bucket (LB_KEY_RATE_LIMIT, this partition's share), optional: its
-- capacity and refill after the events' records, and the bucket hash of each event's
-- signing key as the last n_events KEYS. Absent: off.
local key_capacity = tonumber(ARGV[cursor]) or 0
local key_refill_ms = tonumber(ARGV[cursor + 1]) or 1
local key_rate_at = #KEYS - n_events

--#include token_bucket

--#include records

--#include members

--#include changed_counts

-- A player's member on board b. The board decides whether the member carries the
-- time, not the value (unlike member_of, on purpose: a first_achieved total always
-- has one here, and a stray one on another board must not enter the member).
local function member(b, player, score, achieved)
  if b.fa then
    return enc(score) .. tenc(achieved) .. player
  end
  return enc(score) .. player
end

-- Read once per chunk: shadow flags of its players; per board the totals of the
-- players it references, which of their members are in chz, and the tree size.
local shadowed = {}
if #player_list > 0 then
  local flags = redis.call("HMGET", KEYS[KEY.flags], unpack(player_list))
  for i, p in ipairs(player_list) do
    shadowed[p] = flags[i] == "shadow"
  end
end
for _, b in ipairs(boards) do
  local probe, probe_players = {}, {}
  if #b.wanted_list > 0 then
    local raw = redis.call("HMGET", b.totals, unpack(b.wanted_list))
    for i, p in ipairs(b.wanted_list) do
      local cur = raw[i]
      if cur then
        local entry = {parse_total(cur, "|")}
        b.cur[p] = entry
        if not shadowed[p] and not b.late then
          local m = member(b, p, entry[1], entry[3])
          probe[#probe + 1] = m
          probe_players[#probe_players + 1] = p
          b.probed[p] = m
        end
      elseif b.base[p] ~= "" then
        -- No state in Redis: unchanged since the base generation (the check above
        -- makes the caller's base that one), which holds its total and version.
        b.cur[p] = {parse_total(b.base[p], ",")}
        b.in_chz[p] = false
      else
        b.cur[p] = false
      end
    end
  end
  if #probe > 0 then
    local scores = redis.call("ZMSCORE", b.chz, unpack(probe))
    for i, p in ipairs(probe_players) do
      b.in_chz[p] = scores[i] ~= false
    end
  end
  local first = {}
  if not b.late then
    first = redis.call("ZRANGE", b.bk, 0, 0)
  end
  if #first == 0 then
    b.size = 1
    b.no_buckets = true
  else
    local _, size = parse_bucket(first[1])
    b.size = size
  end
end

-- Bucket holding a score: the one with the largest lower bound <= score; scores below
-- the lowest bound (or a board without boundaries yet) fall in bucket 1.
local function bucket_of(b, score)
  if b.no_buckets then
    return 1, nil
  end
  local known = b.memo[score]
  if known then
    return known[1], known[2]
  end
  local index, lower = 1, nil
  local hit = redis.call("ZREVRANGEBYSCORE", b.bk, score, "-inf", "WITHSCORES", "LIMIT", 0, 1)
  if #hit > 0 then
    index = parse_bucket(hit[1])
    lower = tonumber(hit[2])
  end
  b.memo[score] = {index, lower}
  return index, lower
end

-- Moves the player in the changed-set and the Fenwick tree from old (nil when new to
-- the board) to new. A player absent from chz has not changed since the base, so its
-- old total is its score in the base generation: its base row's bit goes up in chb
-- (at the chunk's end).
local function track(b, player, old, old_achieved, new)
  if b.first[player] == nil then
    -- The first move in the chunk starts from the total read above (its member
    -- computed then, when it was probed in chz).
    b.first[player] = old ~= nil and (b.probed[player] or member(b, player, old, old_achieved))
  end
  local to, lower = bucket_of(b, new)
  local from = nil
  if old then
    from = b.bucket[player]
    if from == nil then
      -- A rise that stays above the new bucket's lower bound stays in that bucket.
      if old <= new and (lower == nil or old >= lower) then
        from = to
      else
        from = bucket_of(b, old)
      end
    end
  end
  b.bucket[player] = to
  if from ~= to then
    if from then
      b.delta[from] = (b.delta[from] or 0) - 1
    end
    b.delta[to] = (b.delta[to] or 0) + 1
    b.fw_touched = true
  end
end

local function write_total(b, player, old, old_achieved, total, version, fa_ms)
  local achieved = nil
  if b.fa then
    -- The player reached this total now unless it is the total it already had.
    achieved = old_achieved
    if old == nil or old ~= total or achieved == nil then
      achieved = fa_ms
    end
  end
  b.cur[player] = {total, version, achieved}
  if not b.touched[player] then
    b.touched[player] = true
    b.touched_list[#b.touched_list + 1] = player
  end
  if shadowed[player] then
    -- Hidden from the histogram, but the board has one, as for any player on it.
    b.fw_touched = true
    return
  end
  track(b, player, old, old_achieved, total)
end

-- Largest contribution left in a best-of board, 0 when none.
local function best_of(key)
  local top = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")
  if #top == 0 then
    return 0
  end
  return tonumber(top[2])
end

-- Record buckets written now all expire at ARG.record_expire_at (a backstop: an
-- epoch's buckets normally leave with it, at a rebase). A bucket
-- given that expiry earlier in the chunk keeps it (HSET keeps a TTL), so it needs no
-- second EXPIREAT, unless the time has passed already (a caller's clock behind
-- Redis's: the EXPIREAT deleted the bucket, and a later write must delete it again,
-- as it would in a call of its own).
local expired_buckets = {}
local expiry_ahead = nil
local function expire_bucket(key)
  if expired_buckets[key] then
    if expiry_ahead == nil then
      expiry_ahead = tonumber(redis.call("TIME")[1]) + 1 < tonumber(record_expire_at)
    end
    if expiry_ahead then
      return
    end
  end
  expired_buckets[key] = true
  redis.call("EXPIREAT", key, record_expire_at)
end

-- The partition's position counter, read on the chunk's first accepted event and
-- written back once at the end (one INCR per event before).
local position_read, position_last = false, 0
local function next_position()
  if not position_read then
    position_read = true
    position_last = tonumber(redis.call("GET", KEYS[KEY.position]) or "0")
  end
  position_last = position_last + 1
  return position_last
end

-- The steps of one event, in order (process below). Each returns kind, payload when
-- the event ends there, nil to go on; what a step learns it leaves on ev.

-- The event's own keys (EV_KEY, from its key_at), named once.
local function event_keys(ev)
  local at = ev.key_at
  ev.rate_key = KEYS[at + EV_KEY.rate]
  ev.recent_key = KEYS[at + EV_KEY.recent]
  -- Then its record buckets in each live epoch, newest (the current one) first.
  local dedupe_at = at + EV_KEY.size
  local contribution_at = dedupe_at + n_epochs
  ev.dedupe_keys, ev.contribution_keys = {}, {}
  for i = 0, n_epochs - 1 do
    ev.dedupe_keys[#ev.dedupe_keys + 1] = KEYS[dedupe_at + i]
    ev.contribution_keys[#ev.contribution_keys + 1] = KEYS[contribution_at + i]
  end
  ev.dedupe_key = ev.dedupe_keys[1]
  ev.contribution_key = ev.contribution_keys[1]
end

-- (a) dedupe. Guarantees: an identity seen before changes nothing and answers its
-- saved result ("duplicate", same content) or "conflict" (other content); a release
-- goes on only for an event still held ("noop" otherwise).
local function dedupe(ev)
  -- The record is in the newest epoch's bucket that has it, else (its epoch left
  -- Redis once landed) in the base generation's landed records index.
  local saved = false
  for _, key in ipairs(ev.dedupe_keys) do
    saved = redis.call("HGET", key, ev.dedupe_field)
    if saved then
      break
    end
  end
  if not saved and ev.landed_dedupe ~= "" then
    saved = ev.landed_dedupe
  end
  if mode == "release" then
    -- Only a held event is released, and only once.
    if redis.call("HEXISTS", KEYS[KEY.quarantine], ev.held_field) == 0 then
      return "noop", "not held in quarantine"
    end
  elseif saved then
    -- The fingerprint prefix is as many bytes as EV.fingerprint holds.
    local n = string.len(ev.fingerprint)
    if string.sub(saved, 1, n) == ev.fingerprint then
      return "duplicate", string.sub(saved, n + 1)
    end
    return "conflict", ""
  end
end

-- (b) the stored contribution of (player, match). Guarantees: ev.rec is the record
-- (empty when none), ev.stored_rev the revision a correction is compared with,
-- ev.is_new_match whether the match was never seen; nothing written, except that a
-- release of an event a later revision replaced ends it ("superseded"), and a
-- correction leaving a board the call does not name ends it untouched ("retry").
local function stored_contribution(ev)
  local given = {}
  for _, ref in ipairs(ev.refs) do
    given[ref.b.id] = true
  end
  -- The record is in the newest epoch's bucket that has it, else in the landed
  -- records index (found_in nil: nothing in Redis to move).
  local raw, found_in = false, nil
  for _, key in ipairs(ev.contribution_keys) do
    raw = redis.call("HGET", key, ev.contribution_field)
    if raw then
      found_in = key
      break
    end
  end
  if not raw and ev.landed_contribution ~= "" then
    raw = ev.landed_contribution
  end
  local rec = decode_record(raw)
  ev.raw, ev.found_in, ev.rec = raw, found_in, rec
  local stored_rev = rec.r or 0
  ev.held_id = rec.q
  local held_before = rec.qr or 0
  local applied = rec.b
  for _, board in ipairs(rec.order) do
    -- A correction that moves a match out of a board must touch that board's keys:
    -- the caller resolves this and calls again with the board included.
    if applied[board] ~= nil and not given[board] then
      return "retry", board
    end
  end
  local is_new_match = raw == false
  if mode == "release" then
    -- As if accepted then: only while no later revision replaced it; the revision it
    -- is compared with is the one stored before it was held.
    if ev.held_id ~= ev.event_id or stored_rev ~= ev.revision then
      redis.call("HDEL", KEYS[KEY.quarantine], ev.held_field)
      return "superseded", ""
    end
    stored_rev = held_before
    is_new_match = false
  end
  ev.stored_rev, ev.is_new_match = stored_rev, is_new_match
end

-- Admission of a new match. Guarantees: a match the rules' plausibility bounds
-- reject ("implausible") or a bucket without a token ("rate_limited") changes
-- nothing and spends no token; an admitted new match spends one of each bucket.
local function admit(ev)
  -- Plausibility bounds of the rules (conf/rules.py) that need the player's history:
  -- rejected outright, nothing applied, no token spent. Only a new match (in apply
  -- mode) is checked, or spends a token.
  if mode ~= "apply" or not ev.is_new_match then
    return
  end
  local occurred_ms = ev.occurred_ms
  local recent_key = ev.recent_key
  if ev.max_per_hour > 0 then
    local recent = redis.call("ZCOUNT", recent_key, "(" .. (occurred_ms - HOUR_MS), occurred_ms)
    if recent >= ev.max_per_hour then
      return "implausible", string.format(
        "max_matches_per_hour: %d accepted matches in the hour before this one; at most %d",
        recent, ev.max_per_hour)
    end
  end
  if ev.min_gap_ms > 0 then
    local prev = redis.call("ZREVRANGEBYSCORE", recent_key, occurred_ms, "-inf",
      "WITHSCORES", "LIMIT", 0, 1)
    if #prev > 0 and occurred_ms - tonumber(prev[2]) < ev.min_gap_ms then
      return "implausible", string.format(
        "max_points_per_minute: %d s since the previous match %s; these points need %d s",
        math.floor((occurred_ms - tonumber(prev[2])) / 1000), prev[1],
        math.ceil(ev.min_gap_ms / 1000))
    end
  end

  -- Per-player token bucket for new match results only: redeliveries (caught above)
  -- and corrections of a stored match never spend tokens; a "correction" of a match
  -- never seen is a new match (API.md), else it would bypass the limit.
  -- The buckets are lib/token_bucket.lua's. The signing key's bucket
  -- (LB_KEY_RATE_LIMIT) counts the same matches; a match spends a token of each
  -- bucket only when both have one.
  if rate_capacity > 0 or key_capacity > 0 then
    local spend = {}
    local wait = 0
    local function check(key, capacity, refill_ms)
      local tokens, bucket_wait = bucket_level(key, capacity, refill_ms, now_ms)
      wait = math.max(wait, bucket_wait)
      spend[#spend + 1] = {key, tokens, capacity, refill_ms}
    end
    if rate_capacity > 0 then
      check(ev.rate_key, rate_capacity, rate_refill_ms)
    end
    if key_capacity > 0 then
      check(KEYS[key_rate_at + ev.index], key_capacity, key_refill_ms)
    end
    if wait > 0 then
      return "rate_limited", tostring(wait)
    end
    for _, s in ipairs(spend) do
      bucket_spend(s[1], s[2], s[3], s[4], now_ms)
    end
  end
end

-- Quarantine. Guarantees: true exactly when a new revision (apply mode) has a
-- contribution above its board's threshold (the historical p99.99 of the event's
-- cohort, published with the generation) on a board not past its cutoff; such an
-- event is held whole: recorded and durable, applied to nothing until released.
local function holds(ev)
  local stored_rev = ev.stored_rev
  local held = false
  if mode == "apply" and not (stored_rev > 0 and ev.revision <= stored_rev) then
    for _, ref in ipairs(ev.refs) do
      local b = ref.b
      local late = b.cutoff > 0 and now_ms > b.cutoff
      if ref.feeds and not late and ref.threshold > 0 and ref.points > ref.threshold then
        held = true
      end
    end
  end
  return held
end

-- (c) the per-board apply of an admitted revision. Guarantees: on every board the
-- event feeds (or the revision before fed), not past its cutoff, the total moves by
-- new - stored contribution (or to the best left, on "max" boards) and its version
-- by one, in this chunk's board tables (written at the chunk's end); ev.rec holds
-- the new contributions; items/saved_as get one entry per such board and per late
-- one; the event's status is returned.
local function apply_boards(ev, items, saved_as)
  local player = ev.player
  local match_id = ev.match_id
  local rec = ev.rec
  local applied = rec.b
  local any_applied = false
  local any_late = false
  -- delta = new - stored contribution, on every board the event feeds; a board the
  -- previous revision fed and this one does not gets its contribution removed. The
  -- contribution record (rec) is written once, at the end of the event.
  for _, ref in ipairs(ev.refs) do
    local b = ref.b
    local late = b.cutoff > 0 and now_ms > b.cutoff
    local old = applied[b.id]
    local cur = b.cur[player]
    local total, version, achieved = nil, 0, nil
    if cur then
      total, version, achieved = cur[1], cur[2], cur[3]
    end
    if late and (ref.feeds or old ~= nil) then
      -- (d) past a season's end + allowedLateness: recorded, not applied.
      any_late = true
      items[#items + 1] = {
        board = b.id, total = b.sign * (total or 0), version = version,
        status = "late-review",
      }
      saved_as[#items] = ref.saved_as
    elseif ref.feeds or old ~= nil then
      local new = 0
      if ref.feeds then
        new = ref.points
      end
      local old_total = total
      if b.agg == "max" then
        if ref.feeds then
          redis.call("ZADD", ref.best, b.sign * new, match_id)
        else
          redis.call("ZREM", ref.best, match_id)
        end
        redis.call("EXPIRE", ref.best, retention)
        total = best_of(ref.best)
      else
        total = (total or 0) + b.sign * (new - (old or 0))
      end
      version = version + 1
      -- first_achieved: when the service accepted the event (receivedAt, the log's
      -- receivedAtMs; a release's is its past acceptance), never its occurredAt.
      write_total(b, player, old_total, achieved, total, version, now_ms)
      record_board(rec, b.id)
      rec.b[b.id] = new
      -- The rule version the contribution was scored under: the record's "u"
      -- unless the board's differs.
      if b.rule ~= default_rule then
        rec.ub[b.id] = b.rule
      end
      any_applied = true
      items[#items + 1] = {board = b.id, total = b.sign * total, version = version}
      saved_as[#items] = ref.saved_as
    end
  end
  rec.u = default_rule
  rec.r = ev.revision
  if ev.held_id then
    -- This revision replaces a held one: releasing that one later changes nothing.
    rec.q, rec.qr = nil, nil
  end
  if ev.is_new_match and any_applied and (ev.min_gap_ms > 0 or ev.max_per_hour > 0) then
    -- A day of history is enough for both bounds; older matches drop out.
    local recent_key = ev.recent_key
    redis.call("ZADD", recent_key, ev.occurred_ms, match_id)
    redis.call("ZREMRANGEBYSCORE", recent_key, "-inf", "(" .. (ev.occurred_ms - 24 * HOUR_MS))
    redis.call("EXPIRE", recent_key, 2 * 24 * 3600)
  end
  local status
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
  return status
end

-- The event's outcome on its boards. Guarantees: a held event touches no board and
-- takes the match's revision (its contributions stay the revision before's, kept
-- for the release); a revision not above the stored one touches no board and reports
-- the current totals ("superseded"); any other is applied (apply_boards).
local function outcome(ev, held, items, saved_as)
  local rec = ev.rec
  local stored_rev = ev.stored_rev
  if held then
    -- No board items: nothing was applied to any board (the log, the rebase and the
    -- rebuild then see no board touched by this record). A resend is superseded.
    rec.r, rec.q, rec.qr = ev.revision, ev.event_id, stored_rev
    return "quarantined"
  elseif stored_rev > 0 and ev.revision <= stored_rev then
    -- Superseded: report the current totals of the boards this event would feed.
    for _, ref in ipairs(ev.refs) do
      local cur = ref.b.cur[ev.player]
      if ref.feeds and cur then
        items[#items + 1] = {
          board = ref.b.id, total = ref.b.sign * cur[1], version = cur[2],
        }
        saved_as[#items] = ref.saved_as
      end
    end
    return "superseded"
  end
  return apply_boards(ev, items, saved_as)
end

-- The contribution record's write. Guarantees: a record the event gave a revision
-- is written once, in the current epoch's bucket (and leaves the older bucket it
-- was found in), with that bucket's expiry.
local function save_contribution(ev)
  local rec = ev.rec
  local contribution_key = ev.contribution_key
  -- Touched: the record lives on from now, in the current epoch's bucket.
  if rec.r then
    local short_of = {}
    for _, ref in ipairs(ev.refs) do
      short_of[ref.b.id] = ref.saved_as
    end
    ev.rc_value = encode_record(rec, ev.context, short_of)
    redis.call("HSET", contribution_key, ev.contribution_field, ev.rc_value)
    expire_bucket(contribution_key)
    if ev.found_in and ev.found_in ~= contribution_key then
      redis.call("HDEL", ev.found_in, ev.contribution_field)
    end
  end
end

-- (e) the log append. Guarantees: the event's record, carrying everything the batch
-- layer needs on its own, is the partition's entry "<position>-0"; a held event's
-- record is also in the quarantine hash, a released one's leaves it.
local function append_log(ev, status, items, position, held)
  -- One array per board (serving/log_records.py owns the form): the ids, partition
  -- and position the reply repeats are the record's own fields already.
  local logged_items = {}
  for j, item in ipairs(items) do
    if item.status then
      logged_items[j] = {item.board, item.total, item.version, item.status}
    else
      logged_items[j] = {item.board, item.total, item.version}
    end
  end
  local result = cjson.encode({status = status, items = logged_items})
  -- A release is logged as "released" (the batch layer applies the held record, at
  -- its position).
  local logged = status
  if mode == "release" then
    logged = "released"
  end
  -- rc: the contribution record as this event left it (what save_contribution
  -- wrote), so the batch layer's landed records index (serving/landed.py) takes it
  -- from the record without folding the match's history.
  local rc = ""
  if ev.rc_value then
    rc = ',"rc":' .. cjson.encode(ev.rc_value)
  end
  local record = string.format(
    '{"partition":%d,"position":%d,"receivedAtMs":%d,"status":"%s","event":%s,"result":%s%s}',
    partition, position, now_ms, logged, ev.event_json, result, rc)
  redis.call("XADD", KEYS[KEY.log], string.format("%d-0", position), "r", record)
  if held then
    redis.call("HSET", KEYS[KEY.quarantine], ev.held_field, record)
  elseif mode == "release" then
    redis.call("HDEL", KEYS[KEY.quarantine], ev.held_field)
  end
end

-- (f) the result. Guarantees: the dedupe record (fingerprint, then the result) is
-- saved once for redeliveries, with its bucket's expiry, and the reply is "ok" with
-- the same compact result.
local function save_result(ev, status, items, saved_as, position)
  local dedupe_key = ev.dedupe_key
  -- (f) save the result for redeliveries, compactly (board ids hold no , ; or |;
  -- boards the event names again written short, statuses one letter, the
  -- partition left out: speed/records.py). The reply is the same compact form.
  local parts = {}
  local previous = nil
  for j, item in ipairs(items) do
    local numbers = "," .. base36(item.total) .. "," .. base36(item.version)
    if item.status then
      numbers = numbers .. "," .. status_letter[item.status]
    end
    -- Same numbers as the item before: the board's name alone.
    if numbers == previous then
      parts[j] = saved_as[j]
    else
      parts[j] = saved_as[j] .. numbers
    end
    previous = numbers
  end
  local compact = status_letter[status] .. "|" .. base36(position) .. "|" ..
    table.concat(parts, ";")
  redis.call("HSET", dedupe_key, ev.dedupe_field, ev.fingerprint .. compact)
  expire_bucket(dedupe_key)
  return "ok", compact
end

-- One event: the steps in order, each ending it early when it answers.
local function process(ev)
  event_keys(ev)
  local kind, payload = dedupe(ev)
  if kind then
    return kind, payload
  end
  kind, payload = stored_contribution(ev)
  if kind then
    return kind, payload
  end
  kind, payload = admit(ev)
  if kind then
    return kind, payload
  end
  local position = next_position()
  local held = holds(ev)
  -- The board of each item as the saved result writes it (speed/records.py).
  local items, saved_as = {}, {}
  local status = outcome(ev, held, items, saved_as)
  save_contribution(ev)
  append_log(ev, status, items, position, held)
  return save_result(ev, status, items, saved_as, position)
end

local out = {}
for e, ev in ipairs(events) do
  local kind, payload = process(ev)
  out[2 * e - 1] = kind
  out[2 * e] = payload
  if kind == "retry" then
    -- Nothing happened for this event; the ones after it wait for its second try,
    -- so the partition's events still apply in the order sent.
    break
  end
end

if position_read then
  redis.call("SET", KEYS[KEY.position], position_last)
end

-- Write the per-board structures once for the chunk.
for _, b in ipairs(boards) do
  if #b.touched_list > 0 then
    local fields = {}
    local chz_add, chz_remove, chb_rows = {}, {}, {}
    for _, p in ipairs(b.touched_list) do
      local cur = b.cur[p]
      if cur[3] then
        fields[#fields + 1] = p
        fields[#fields + 1] = string.format("%d|%d|%d", cur[1], cur[2], cur[3])
      else
        fields[#fields + 1] = p
        fields[#fields + 1] = string.format("%d|%d", cur[1], cur[2])
      end
      if not shadowed[p] then
        local was = b.first[p]
        local now = member(b, p, cur[1], cur[3])
        if was and b.in_chz[p] then
          if was ~= now then
            chz_remove[#chz_remove + 1] = was
            chz_add[#chz_add + 1] = 0
            chz_add[#chz_add + 1] = now
          end
        else
          -- First change since the base: the base row (if any) leaves the merge.
          local row = b.row[p]
          if row and row >= 0 then
            chb_rows[#chb_rows + 1] = row
          end
          chz_add[#chz_add + 1] = 0
          chz_add[#chz_add + 1] = now
        end
      end
    end
    redis.call("HSET", b.totals, unpack(fields))
    if #chz_remove > 0 then
      redis.call("ZREM", b.chz, unpack(chz_remove))
    end
    set_changed_rows(b.chb, b.chc, chb_rows)
    if #chz_add > 0 then
      redis.call("ZADD", b.chz, unpack(chz_add))
    end
  end
  if b.fw_touched then
    -- Fenwick point updates summed per bucket, then per tree node: one BITFIELD.
    -- Nodes whose changes cancel out are still named (INCRBY 0): the string then
    -- grows exactly as one update per event would have grown it.
    local nodes = {}
    for i, d in pairs(b.delta) do
      fenwick_add(nodes, i, b.size, d)
    end
    local ops = fenwick_ops(nodes)
    if #ops == 0 then
      -- The board has a tree, as for any player on it (an INCRBY of 0 creates it).
      ops = {"INCRBY", "i32", "#0", 0}
    end
    redis.call("BITFIELD", b.fw, unpack(ops))
  end
end
return out
