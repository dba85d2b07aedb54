"""Per-unit Redis costs of the speed layer, for docs/CAPACITY.md.

    python -m bench.capacity [--players 5000] [--events 20000] [--backend single]

Starts its own Redis (one ``redis-server``, or with ``--backend cluster`` a local
three-master Redis Cluster), AOF with ``appendfsync always`` like `lb up`, applies
events straight through ``SpeedLayer.apply`` (no HTTP) in batches of 1000, and
reports, from ``INFO`` and ``MEMORY USAGE`` of every key:

* bytes per structure: totals hash per player per board, live changed-set per
  changed player per board, dedupe and contribution record per event, log entry per
  unlanded event, the fixed keys of a partition; and a full sorted set of the same
  board for comparison;
* the owner transaction's cost: ``EVALSHA`` calls, µs per call and per event from
  ``INFO commandstats`` (summed over the masters), and Redis CPU per event from
  ``INFO cpu``.

Every event is dated one hour ago, so all of them feed the same boards; no
generation is published, so every player on a board is "changed" (``chz``) and the
base-side changed-set (``chs``) is empty: after a publish a changed player costs
both (see docs/CAPACITY.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import redis

from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.cluster_server import RedisClusterServer
from speed.connection import async_client, sync_client
from speed.events import validate_event
from speed.server import RedisServer
from speed.store import SpeedLayer

BATCH = 1000
# Key structures outside the per-player/per-event ones: what every partition holds.
FIXED = ("pos", "landed", "base", "flags", "qr", "fw", "bk")


def _nodes(client: redis.Redis) -> list[redis.Redis]:
    """One plain client per master (the single server itself otherwise)."""
    get_primaries = getattr(client, "get_primaries", None)
    if get_primaries is None:
        return [client]
    return [redis.Redis(host=n.host, port=n.port) for n in get_primaries()]


def _structure(key: bytes) -> str:
    # lb:{pN}:<structure>[:...]; others (lb-reads:..., lb:{audit}:log) by prefix
    parts = key.decode().split(":")
    if len(parts) >= 3 and parts[1].startswith("{p"):
        return parts[2]
    return ":".join(parts[:2])


def _events(players: int, count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    moment = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # Every player once, then random players: each later event is a new match.
    order = list(range(players))
    order += [rng.randrange(players) for _ in range(max(0, count - players))]
    return [
        {
            "eventId": f"e{n}",
            "playerId": f"P{p}",
            "matchId": f"m{n}",
            "sourceRevision": 1,
            "occurredAt": moment,
            "region": ("eu", "na")[p % 2],
            "result": {"points": rng.randrange(0, 1000)},
            "kind": "result",
            "reason": None,
        }
        for n, p in enumerate(order)
    ]


async def _apply(url: str, raws: list[dict[str, Any]]) -> tuple[int, int, float]:
    """(accepted, board rows fed, seconds)."""
    settings = Settings(rate_limit="off")
    boards = load_boards(settings.boards_file)
    rules = default_registry()
    now = datetime.now(UTC)
    valid = [validate_event(r, settings, boards, now, rules) for r in raws]
    client = async_client(url, max_connections=64)
    speed = SpeedLayer(
        client, boards, settings.partitions, settings.retention_seconds, None, rules
    )
    accepted = fed = 0
    started = time.perf_counter()
    try:
        for first in range(0, len(valid), BATCH):
            for outcome in await speed.apply(valid[first : first + BATCH]):
                if outcome.body is not None and outcome.body["status"] == "accepted":
                    accepted += 1
                    fed += len(outcome.body["boards"])
    finally:
        await client.aclose()
    return accepted, fed, time.perf_counter() - started


def measure(url: str, players: int, events: int, seed: int) -> dict[str, Any]:
    client = sync_client(url)
    nodes = _nodes(client)
    for node in nodes:
        node.config_resetstat()
    cpu_before = sum(
        float(n.info("cpu")["used_cpu_user"]) + float(n.info("cpu")["used_cpu_sys"])
        for n in nodes
    )
    raws = _events(players, events, seed)
    accepted, fed, elapsed = asyncio.run(_apply(url, raws))
    cpu = (
        sum(
            float(n.info("cpu")["used_cpu_user"]) + float(n.info("cpu")["used_cpu_sys"])
            for n in nodes
        )
        - cpu_before
    )
    calls = usec = 0
    for node in nodes:
        stat = node.info("commandstats").get("cmdstat_evalsha", {})
        calls += int(stat.get("calls", 0))
        usec += int(stat.get("usec", 0))
    sizes: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    partitions: set[str] = set()
    log_entries = 0
    for key in client.scan_iter(match="*", count=1000):
        kind = _structure(key)
        sizes[kind] += int(client.memory_usage(key, samples=0) or 0)
        # Dedupe (rd) and contribution (rc) records are fields of bucket hashes
        # (speed/records.py): count the records, not the buckets.
        counts[kind] += int(client.hlen(key)) if kind in ("rd", "rc") else 1
        if key.startswith(b"lb:{p"):
            partitions.add(key.decode().split(":")[1])
        if kind == "log":
            log_entries += int(client.xlen(key))
    # A full sorted set of the season's global board, for comparison.
    board = "season:S4:global"
    full = "lb:{bench}:full"
    on_board = 0
    for part in partitions:
        totals = cast(dict[bytes, bytes], client.hgetall(f"lb:{part}:tot:{board}"))
        if totals:
            members = {p.decode(): int(v.split(b"|", 1)[0]) for p, v in totals.items()}
            client.zadd(full, members)  # type: ignore[arg-type]
            on_board += len(totals)
    full_bytes = int(client.memory_usage(full, samples=0) or 0) if on_board else 0
    client.delete(full)
    used = sum(int(n.info("memory")["used_memory"]) for n in nodes)
    players_seen = len({r["playerId"] for r in raws})
    boards_per_event = fed / accepted if accepted else 0
    chz_members = sum(
        int(client.zcard(k)) for k in client.scan_iter(match="lb:*:chz:*", count=1000)
    )
    tot_fields = sum(
        int(client.hlen(k)) for k in client.scan_iter(match="lb:*:tot:*", count=1000)
    )
    for node in nodes:
        if node is not client:
            node.close()
    client.close()
    fixed = sum(sizes.get(k, 0) for k in FIXED)
    return {
        "masters": len(nodes),
        "events": len(raws),
        "accepted": accepted,
        "players": players_seen,
        "boards_per_event": round(boards_per_event, 2),
        "elapsed_s": round(elapsed, 2),
        "evalsha_calls": calls,
        "events_per_call": round(accepted / calls, 1) if calls else None,
        "evalsha_usec_per_call": round(usec / calls, 1) if calls else None,
        "evalsha_usec_per_event": round(usec / accepted, 1) if accepted else None,
        "redis_cpu_usec_per_event": round(cpu * 1e6 / accepted, 1)
        if accepted
        else None,
        "bytes": {
            "tot_per_player_board": round(sizes["tot"] / tot_fields, 1)
            if tot_fields
            else None,
            "chz_per_changed_player_board": round(sizes["chz"] / chz_members, 1)
            if chz_members
            else None,
            "full_zset_per_player": round(full_bytes / on_board, 1)
            if on_board
            else None,
            "dedupe_per_event": round(sizes["rd"] / counts["rd"], 1)
            if counts["rd"]
            else None,
            "contribution_per_event": round(sizes["rc"] / counts["rc"], 1)
            if counts["rc"]
            else None,
            "recent_matches_per_player": round(sizes["pm"] / counts["pm"], 1)
            if counts["pm"]
            else None,
            "log_per_unlanded_event": round(sizes["log"] / log_entries, 1)
            if log_entries
            else None,
            "fixed_per_partition": round(fixed / len(partitions), 1)
            if partitions
            else None,
            "used_memory_per_event": round(used / accepted, 1) if accepted else None,
        },
        "structures": {
            k: {"keys": counts[k], "bytes": sizes[k]} for k in sorted(sizes)
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.capacity", description=__doc__
    )
    parser.add_argument("--players", type=int, default=5000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backend", choices=("single", "cluster"), default="single")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lb-capacity-") as tmp:
        server: RedisServer | RedisClusterServer
        if args.backend == "cluster":
            server = RedisClusterServer(Path(tmp), masters=3).start()
        else:
            server = RedisServer(Path(tmp), appendfsync="always").start()
        try:
            url = server.url
            report = measure(url, args.players, args.events, args.seed)
        finally:
            server.stop()
    report["backend"] = args.backend
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
