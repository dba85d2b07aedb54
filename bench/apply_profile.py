"""Redis cost of the owner transaction (apply_event.lua) per event, by command.

Starts a throwaway ``redis-server`` (AOF, ``appendfsync always``, as `lb up`), applies
``--events`` events of ``bench.ingest``'s shape (every event feeding the default 10
boards, unique eventId and matchId, players drawn from ``--players``) through
``SpeedLayer.apply`` in batches of ``--batch-size`` (no HTTP), and reports per event:

- Redis CPU from ``/proc`` (user + system of the server process: includes the fsync
  and the reply writes, the figure `make bench` reports);
- ``EVALSHA`` time from ``INFO commandstats`` (the script, commands inside it
  included);
- ``redis.call``s inside the script by command (calls and µs per event).

``--script A.lua --script B.lua`` runs each variant (a modified copy of the owner
transaction, e.g. with a section switched off) ``--rounds`` times, alternating, each
on a fresh server with the same events, so variants are compared on the same load.
A warm-up of ``--warmup`` events runs before the clock in each round.

    .venv/bin/python -m bench.apply_profile --events 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from bench.harness import CLK_TCK, EventFactory, bench_boards, prepared_batches
from speed.lua import include
from speed.scripts import APPLY_EVENT, source
from speed.server import RedisServer

if TYPE_CHECKING:
    from speed.store import SpeedLayer

NOOP = 'select("#", '
# Sections of apply_event.lua switched off by text replacement, for the cost split
# (--ablate NAME): (old text, new text) pairs; a pair whose old text is missing is an
# error (the script changed: update the pair). The replies stay well-formed.
ABLATIONS: dict[str, list[tuple[str, str]]] = {
    # The dedupe and contribution record lookups (every event then looks new).
    "lookups": [
        ('saved = redis.call("HGET", key, ev.dedupe_field)', "saved = false"),
        ('raw = redis.call("HGET", key, ev.contribution_field)', "raw = false"),
    ],
    # The record writes (values still encoded).
    "record_writes": [
        ('redis.call("HSET", contribution_key,', NOOP + "contribution_key,"),
        ('redis.call("HSET", dedupe_key,', NOOP + "dedupe_key,"),
        ('redis.call("EXPIREAT", key,', NOOP + "key,"),
    ],
    # The log append (the record still formatted).
    "log": [('redis.call("XADD", KEYS[KEY.log],', NOOP + "KEYS[KEY.log],")],
    # The per-chunk reads of the boards' totals, chz membership and bucket bounds.
    "board_reads": [
        (
            'local raw = redis.call("HMGET", b.totals, unpack(b.wanted_list))',
            "local raw = {}",
        ),
        ('first = redis.call("ZRANGE", b.bk, 0, 0)', "first = {}"),
    ],
    # The per-chunk writes of totals, changed-sets and Fenwick trees.
    "board_writes": [
        ('redis.call("HSET", b.totals,', NOOP + "b.totals,"),
        ('redis.call("ZREM", b.chz,', NOOP + "b.chz,"),
        ("set_changed_rows(b.chb,", NOOP + "b.chb,"),
        ('redis.call("ZADD", b.chz,', NOOP + "b.chz,"),
        ('redis.call("BITFIELD", b.fw,', NOOP + "b.fw,"),
    ],
    # The totals hash alone (issue 25 item 2): its write and its read (every total
    # then comes from the base row, as for a player unchanged since the base).
    "totals": [
        ('redis.call("HSET", b.totals,', NOOP + "b.totals,"),
        (
            'local raw = redis.call("HMGET", b.totals, unpack(b.wanted_list))',
            "local raw = {}",
        ),
    ],
    # The totals hash's write alone.
    "totals_write": [('redis.call("HSET", b.totals,', NOOP + "b.totals,")],
    # The result's JSON for the log record (cjson.encode).
    "result_json": [
        ("local result = cjson.encode({", 'local result = "{}" or cjson.encode({')
    ],
    # Encoding the saved result (base 36 numbers, short boards).
    "saved_result": [
        (
            'local numbers = "," .. base36(item.total) .. "," .. base36(item.version)',
            'local numbers = ",1,1"',
        ),
    ],
    # Encoding the contribution record (its value becomes a constant).
    "contribution_value": [
        ("ev.rc_value = encode_record(rec, ev.context, short_of)", 'ev.rc_value = "x"'),
    ],
    # Bucket and changed-set bookkeeping per board of an event (track()).
    "track": [("  track(b, player, old, old_achieved, total)\n", "\n")],
    # Everything after the arguments are parsed into tables: fixed replies.
    "after_parse": [
        (
            "-- Numbers of saved results in base 36",
            'do local out = {} for e = 1, n_events do out[2 * e - 1] = "ok" '
            'out[2 * e] = "a|1|" end return out end\n'
            "-- Numbers of saved results in base 36",
        ),
    ],
    # Everything after the generation check: EVALSHA's own cost (arguments in).
    "everything": [
        (
            "local HOUR_MS = 3600000",
            'do local out = {} for e = 1, n_events do out[2 * e - 1] = "ok" '
            'out[2 * e] = "a|1|" end return out end\n'
            "local HOUR_MS = 3600000",
        ),
    ],
}


# --rewrite: other designs of a part of the owner transaction, priced against it on
# the same events (not exact for the readers: only apply_event.lua changes).
# "packed_totals" (issue 25 item 2, the alternative to per-board totals hashes):
# every board's "total|version[|achievedMs]" of a player in one field
# "<board>=<value>;..." of one hash per partition, read with one HMGET and written
# with one HSET per chunk, instead of one field per board in ten hashes.
PACKED_READ = """-- every board's total of a player, one packed field per player
local packed_key = KEYS[KEY.base] .. ":pt"
local packed = {}
if #player_list > 0 then
  local raw = redis.call("HMGET", packed_key, unpack(player_list))
  for i, p in ipairs(player_list) do
    local t = {}
    if raw[i] then
      for bid, val in string.gmatch(raw[i], "([^=;]+)=([^;]+)") do
        t[bid] = val
      end
    end
    packed[p] = t
  end
end
for _, b in ipairs(boards) do
  local probe, probe_players = {}, {}
  if #b.wanted_list > 0 then
    for i, p in ipairs(b.wanted_list) do
      local cur = packed[p][b.id]
"""
PACKED_WRITE = """
if #packed_dirty_list > 0 then
  local fields = {}
  for _, p in ipairs(packed_dirty_list) do
    local parts = {}
    for bid, val in pairs(packed[p]) do
      parts[#parts + 1] = bid .. "=" .. val
    end
    fields[#fields + 1] = p
    fields[#fields + 1] = table.concat(parts, ";")
  end
  redis.call("HSET", packed_key, unpack(fields))
end
return out
"""
# "keyed_changed_set": the design item 2 names, priced on the write path only: the
# changed-set keyed by player (member = playerId, score = -oriented total), read with
# one ZMSCORE and updated with one ZADD per board per chunk, no totals hash and no
# ZREM of the old member. It drops the versions (every result says version 1) and
# holds only on boards without first_achieved (the bench's): see
# history/2026-12-03-3-session-18-chz.md for why it is not exact.
REWRITES: dict[str, list[tuple[str, str]]] = {
    "keyed_changed_set": [
        (
            """    local raw = redis.call("HMGET", b.totals, unpack(b.wanted_list))
    for i, p in ipairs(b.wanted_list) do
      local cur = raw[i]
      if cur then
        local entry = {parse_total(cur, "|")}
""",
            """    local raw = redis.call("ZMSCORE", b.chz, unpack(b.wanted_list))
    for i, p in ipairs(b.wanted_list) do
      local cur = raw[i]
      if cur then
        local entry = {-tonumber(cur), 0}
""",
        ),
        (
            'local scores = redis.call("ZMSCORE", b.chz, unpack(probe))',
            "local scores = probe",
        ),
        ('    redis.call("HSET", b.totals, unpack(fields))\n', ""),
        ("chz_remove[#chz_remove + 1] = was\n", "local _ = was\n"),
        ("chz_add[#chz_add + 1] = 0\n", "chz_add[#chz_add + 1] = -cur[1]\n"),
        ("chz_add[#chz_add + 1] = now\n", "chz_add[#chz_add + 1] = p\n"),
    ],
    "packed_totals": [
        (
            """for _, b in ipairs(boards) do
  local probe, probe_players = {}, {}
  if #b.wanted_list > 0 then
    local raw = redis.call("HMGET", b.totals, unpack(b.wanted_list))
    for i, p in ipairs(b.wanted_list) do
      local cur = raw[i]
""",
            PACKED_READ,
        ),
        (
            """      if cur[3] then
        fields[#fields + 1] = p
        fields[#fields + 1] = string.format("%d|%d|%d", cur[1], cur[2], cur[3])
      else
        fields[#fields + 1] = p
        fields[#fields + 1] = string.format("%d|%d", cur[1], cur[2])
      end
""",
            """      if cur[3] then
        packed[p][b.id] = string.format("%d|%d|%d", cur[1], cur[2], cur[3])
      else
        packed[p][b.id] = string.format("%d|%d", cur[1], cur[2])
      end
      if not packed_dirty[p] then
        packed_dirty[p] = true
        packed_dirty_list[#packed_dirty_list + 1] = p
      end
""",
        ),
        ('    redis.call("HSET", b.totals, unpack(fields))\n', ""),
        (
            "-- Write the per-board structures once for the chunk.\n",
            "-- Write the per-board structures once for the chunk.\n"
            "local packed_dirty, packed_dirty_list = {}, {}\n",
        ),
        ("\nreturn out\n", PACKED_WRITE),
    ],
}

# --sections: laps of the script's wall clock (Redis TIME, µs) taken before each of
# these lines, summed per section into "prof:<section>" counters (the section is the
# one the line ends). Wall time: descheduling on a loaded machine inflates every
# section alike, so read it as shares, not as CPU. Each lap is one TIME call.
SECTION_ENDS: list[tuple[str, str]] = [
    ("-- Numbers of saved results in base 36", "parse"),
    ("-- Bucket holding a score: the one", "board_reads"),
    ("  local rec = decode_record(raw)\n", "record_lookups"),
    ("  -- Plausibility bounds of the rules", "record_decode"),
    ("  local position = next_position()\n", "plausibility_rate"),
    ("  -- Touched: the record lives on from now", "apply_loop"),
    ("  local result = cjson.encode({", "contribution_write"),
    ("  -- (f) save the result for redeliveries", "result_json_log_xadd"),
    ('  return "ok", compact\nend', "saved_result_dedupe_write"),
    ("-- Write the per-board structures once for the chunk.", "other"),
]
LAPS = """local PROF, PROF_T = {}, 0
local function lap(name)
  local t = redis.call("TIME")
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if name then
    PROF[name] = (PROF[name] or 0) + (now - PROF_T)
  end
  PROF_T = now
end
lap(nil)
"""


def with_sections(script: str) -> str:
    """The script with laps (see SECTION_ENDS); the last section is the per-chunk
    board writes, from the last marker to the end."""
    start = "local events = {}\n"
    for marker in [start] + [m for m, _ in SECTION_ENDS]:
        if script.count(marker) != 1:
            raise SystemExit(f"--sections: {marker!r} not once in the script")
    script = script.replace(start, LAPS + start)
    for marker, name in SECTION_ENDS:
        script = script.replace(marker, f'lap("{name}")\n' + marker)
    end = "\nreturn out\n"
    if not script.endswith(end):
        raise SystemExit("--sections: the script no longer ends with 'return out'")
    return (
        script[: -len(end)]
        + '\nlap("board_writes")\n'
        + 'for k, v in pairs(PROF) do redis.call("INCRBY", "prof:" .. k, v) end'
        + end
    )


def _runnable(text: str) -> str:
    """A --script variant as Redis runs it: a copy of the .lua file gets the
    generated offset tables and its fragments (a copy of source() is kept as is)."""
    header = APPLY_EVENT.lua_header()
    return text if text.startswith(header) else header + include(text)


def ablated(
    script: str, name: str, table: dict[str, list[tuple[str, str]]] = ABLATIONS
) -> str:
    for old, new in table[name]:
        if old not in script:
            raise SystemExit(f"--ablate {name}: {old!r} not in the script")
        script = script.replace(old, new)
    return script


def _cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def _prepare(
    factory: EventFactory, events: int, batch_size: int, tag: str
) -> list[list[Any]]:
    return [valid for _, valid in prepared_batches(factory, events, batch_size, tag)]


def _speed_layer(client: Any) -> SpeedLayer:
    """The API's SpeedLayer on ``client`` over the bench boards, with the default
    partitions and record TTL and no rate limit (one setup for every measurement)."""
    from conf.settings import Settings
    from speed.store import SpeedLayer

    settings = Settings(rate_limit="off")
    return SpeedLayer(
        client,
        bench_boards(),
        settings.partitions,
        settings.record_ttl_seconds,
        None,
    )


async def _apply_all(url: str, script: str, batches: list[list[Any]]) -> dict[str, int]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(url, max_connections=16)
    speed = _speed_layer(client)
    speed._apply = client.register_script(script)
    statuses: dict[str, int] = {}
    try:
        for batch in batches:
            for outcome in await speed.apply(batch):
                key = (outcome.body or {}).get("status") or type(outcome.error).__name__
                statuses[key] = statuses.get(key, 0) + 1
    finally:
        await client.aclose()
    return statuses


def encode_cost(batches: list[list[Any]], repeats: int = 5) -> float:
    """Python CPU (µs per event, best of ``repeats``) of building the owner
    transaction's EVALSHAs (``SpeedLayer._chunk_command``) and serializing them
    (redis-py ``pack_commands``), as the API does per request; no Redis."""
    import redis.asyncio as aioredis

    from speed.partitions import partition_of
    from speed.scoring import score_event
    from speed.store import _Call

    client = aioredis.Redis()
    speed = _speed_layer(client)
    speed._bases = dict.fromkeys(range(speed.partitions), 0)
    connection = client.connection_pool.make_connection()
    for batch in batches:
        for e in batch:
            if not e.scores:
                score_event(e, speed.boards, speed.rules)
    n = sum(len(b) for b in batches)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for batch in batches:
            by_partition: dict[int, list[_Call]] = {}
            for e in batch:
                p = partition_of(e.event.playerId, speed.partitions)
                call = _Call(e, p, speed._boards_for(e.occurred_at, e.event.region))
                by_partition.setdefault(p, []).append(call)
            now_ms = int(time.time() * 1000)
            connection.pack_commands(
                [
                    speed._chunk_command(p, calls, "apply", now_ms)
                    for p, calls in by_partition.items()
                ]
            )
        best = min(best, (time.process_time() - start) / n * 1e6)
    return round(best, 1)


def one_round(
    script: str, warm: list[list[Any]], timed: list[list[Any]]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lb-apply-profile-") as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            assert server.process is not None
            pid = server.process.pid
            client = redis.Redis.from_url(server.url)
            asyncio.run(_apply_all(server.url, script, warm))
            client.config_resetstat()
            for key in client.scan_iter(match="prof:*"):
                client.delete(key)
            (user0, sys0), wall0 = _cpu(pid), time.perf_counter()
            statuses = asyncio.run(_apply_all(server.url, script, timed))
            (user1, sys1), wall = _cpu(pid), time.perf_counter() - wall0
            user, system = user1 - user0, sys1 - sys0
            cpu = user + system
            aof = int(client.info("persistence").get("aof_current_size", 0))
            n = sum(len(b) for b in timed)
            stats = client.info("commandstats")
            sections: dict[str, float] = {}
            for key in client.scan_iter(match="prof:*"):
                name = key.decode().removeprefix("prof:")
                sections[name] = round(int(client.get(key) or 0) / n, 1)
            client.close()
        finally:
            server.stop()
    commands = {
        name.removeprefix("cmdstat_"): {
            "calls_per_event": round(v["calls"] / n, 3),
            "us_per_event": round(v["usec"] / n, 2),
        }
        for name, v in stats.items()
    }
    evalsha = commands.pop("evalsha", {"us_per_event": 0.0, "calls_per_event": 0})
    for name in (
        "config|resetstat",
        "info",
        "ping",
        "script|load",
        "hget",
        "client|setinfo",
    ):
        # Made by the client outside the script, once per run (hget: base probe).
        if name in commands and commands[name]["calls_per_event"] < 0.01:
            commands.pop(name)
    return {
        "events": n,
        "statuses": statuses,
        "redis_cpu_us_per_event": round(cpu / n * 1e6, 1),
        "redis_user_us_per_event": round(user / n * 1e6, 1),
        "redis_system_us_per_event": round(system / n * 1e6, 1),
        "aof_bytes_per_event_incl_warmup": round(
            aof / (n + sum(len(b) for b in warm)), 1
        ),
        "wall_s": round(wall, 3),
        "events_per_s": round(n / wall, 1),
        "evalsha_us_per_event": evalsha["us_per_event"],
        "evalsha_calls_per_event": evalsha["calls_per_event"],
        "calls_per_event": round(
            sum(c["calls_per_event"] for c in commands.values()), 2
        ),
        "commands": dict(
            sorted(commands.items(), key=lambda kv: -kv[1]["us_per_event"])
        ),
        "section_wall_us_per_event": sections,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.apply_profile", description=__doc__
    )
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--warmup", type=int, default=5_000)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--players", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument(
        "--script",
        action="append",
        type=Path,
        help="a variant of apply_event.lua (repeatable; default: the shipped one)",
    )
    p.add_argument(
        "--rewrite",
        action="append",
        choices=sorted(REWRITES),
        default=[],
        help="also run the script with this part redesigned (repeatable; REWRITES)",
    )
    p.add_argument(
        "--ablate",
        action="append",
        choices=sorted(ABLATIONS),
        default=[],
        help="also run the script with this section switched off (repeatable)",
    )
    p.add_argument(
        "--sections",
        action="store_true",
        help="also run each variant with wall-clock laps per section (Redis TIME)",
    )
    p.add_argument(
        "--encode-only",
        action="store_true",
        help="only measure the Python side: building and serializing the EVALSHAs",
    )
    p.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = p.parse_args(argv)
    variants = {str(s): _runnable(s.read_text()) for s in args.script or []} or {
        "apply_event.lua": source(APPLY_EVENT)
    }
    base = next(iter(variants.values()))
    for name in args.ablate:
        variants[f"without {name}"] = ablated(base, name)
    for name in args.rewrite:
        variants[f"rewritten {name}"] = ablated(base, name, REWRITES)
    if args.sections:
        for name, text in list(variants.items()):
            variants[f"{name} with sections"] = with_sections(text)
    factory = EventFactory(args.players, args.seed, datetime.now(UTC))
    warm = _prepare(factory, args.warmup, args.batch_size, "w")
    timed = _prepare(factory, args.events, args.batch_size, "t")
    if args.encode_only:
        print(
            "Python, building + serializing the EVALSHAs: "
            f"{encode_cost(timed)} µs/event (best of 5, {args.events} events)"
        )
        return 0
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, text in variants.items():
            result = one_round(text, warm, timed)
            runs[name].append(result)
            print(
                f"round {r + 1} {name}: Redis CPU {result['redis_cpu_us_per_event']} "
                f"µs/event (user {result['redis_user_us_per_event']}, system "
                f"{result['redis_system_us_per_event']}), EVALSHA "
                f"{result['evalsha_us_per_event']} µs/event, "
                f"{result['calls_per_event']} calls/event, "
                f"{result['events_per_s']} events/s, {result['statuses']}",
                flush=True,
            )
    report: dict[str, Any] = {
        "load_average": os.getloadavg(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "summary": {
            name: {
                "median_redis_cpu_us_per_event": statistics.median(
                    x["redis_cpu_us_per_event"] for x in xs
                ),
                # Other processes only add to a round's CPU time (caches, switches):
                # on a loaded machine the lowest round is the steadier figure.
                "min_redis_cpu_us_per_event": min(
                    x["redis_cpu_us_per_event"] for x in xs
                ),
                "median_evalsha_us_per_event": statistics.median(
                    x["evalsha_us_per_event"] for x in xs
                ),
            }
            for name, xs in runs.items()
        },
        "runs": runs,
    }
    for name, s in report["summary"].items():
        print(f"median {name}: {s}")
    last = next(iter(runs.values()))[-1]
    for name, xs in runs.items():
        laps = xs[-1]["section_wall_us_per_event"]
        if laps:
            total = sum(laps.values())
            print(f"sections of {name} (wall µs/event, last round):")
            for section, us in sorted(laps.items(), key=lambda kv: -kv[1]):
                print(f"  {section:28s} {us:8.1f} µs {100 * us / total:5.1f} %")
    print("commands per event (last round of the first variant):")
    for cmd, c in last["commands"].items():
        print(
            f"  {cmd:24s} {c['calls_per_event']:8.3f} calls {c['us_per_event']:8.2f} µs"
        )
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
