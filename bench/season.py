"""Season close benchmark: time of ``close_season`` and Redis bytes freed by dropping
the closed season's speed-layer keys.

    python -m bench.season --players 100000 --events 200000

1. Starts a private redis-server (AOF, ``appendfsync everysec`` to keep ingest
   short; durability is not what is measured) and a temp ``LB_DATA_DIR``.
2. A boards file with season ``SB`` (regions eu, na) ending a little after ingest,
   1 s of lateness; rolling windows stay open.
3. Applies the events through the speed layer (``SpeedLayer.apply``, batches of
   1000; every player gets at least one event, points in a small range).
4. After the close time: sums Redis' ``MEMORY USAGE`` of the season boards' keys
   (what dropping them frees), reads ``used_memory``, times ``close_season``
   (land + final publish + rebase + award snapshot + Delta ``gold_awards``), then
   checks the keys are gone and reads ``used_memory`` again.

Results go to stdout as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from conf.boards import load_boards
from conf.settings import Settings
from speed.partitions import KEY_PREFIX, Keys, tag
from speed.server import RedisServer
from speed.store import SpeedLayer


def season_keys(client: redis.Redis, partitions: int, boards: list[str]) -> list[str]:
    names: list[str] = []
    for p in range(partitions):
        keys = Keys(p)
        for board in boards:
            names += [
                keys.totals(board),
                keys.changed_live(board),
                keys.changed_snapshot(board),
                keys.fenwick(board),
                keys.buckets(board),
            ]
            names += [
                k.decode()
                for k in client.scan_iter(
                    match=f"{KEY_PREFIX}:{tag(p)}:mx:{board}:*", count=1000
                )
            ]
    return [n for n in names if client.exists(n)]


def memory_of(client: redis.Redis, names: list[str]) -> int:
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.memory_usage(name, samples=0)
    return sum(int(v or 0) for v in pipe.execute())


async def ingest(
    settings: Settings, players: int, events: int, played: datetime
) -> int:
    boards = load_boards(settings.boards_file)
    client = aioredis.from_url(settings.redis_url or "", max_connections=8)
    layer = SpeedLayer(
        client, boards, settings.partitions, settings.retention_seconds, None
    )
    from api.routes.score_events import validate_event
    from conf.rules import default_registry

    rules = default_registry(settings.points_min, settings.points_max)
    rng = random.Random(8)
    now = datetime.now(UTC)
    batch = []
    sent = 0
    for i in range(events):
        player = (
            f"P{i % players:07d}" if i < players else f"P{rng.randrange(players):07d}"
        )
        raw = {
            "eventId": f"E{i}",
            "playerId": player,
            "matchId": f"M{i}",
            "sourceRevision": 1,
            "occurredAt": played.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "eu" if i % 3 else "na",
            "result": {"points": rng.randrange(0, 200)},
        }
        # The API's own checks and scoring (the rule's points go with the event).
        batch.append(validate_event(raw, settings, boards, now, rules))
        if len(batch) == 1000:
            await layer.apply(batch)
            sent += len(batch)
            batch = []
    if batch:
        await layer.apply(batch)
        sent += len(batch)
    await client.aclose()
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--players", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    from jobs.season import close_season
    from jobs.spark import get_spark

    root = Path(tempfile.mkdtemp(prefix="bench-season-"))
    server = RedisServer(root / "redis", appendfsync="everysec").start()
    try:
        # Ingest first with an end far enough ahead, then close once it has passed.
        end_guess = datetime.now(UTC) + timedelta(hours=1)
        boards_file = root / "boards.yaml"
        settings = Settings(
            redis_url=server.url,
            data_dir=root / "lb",
            partitions=args.partitions,
            rate_limit="off",
            boards_file=boards_file,
        )

        def write_boards(end: datetime) -> None:
            boards_file.write_text(
                "regions: [eu, na]\n"
                "windowLateness: P3650D\n"
                "seasons:\n"
                f"  - {{id: SB, start: '{(end - timedelta(days=7)).isoformat()}', "
                f"end: '{end.isoformat()}', allowedLateness: PT1S,\n"
                "     tiers: [{name: champion, top: 1}, {name: top10, top: 10},\n"
                "             {name: top1pct, topPercent: 1}]}\n"
            )

        write_boards(end_guess)
        played = end_guess - timedelta(hours=2)
        started = time.perf_counter()
        sent = asyncio.run(ingest(settings, args.players, args.events, played))
        ingest_s = time.perf_counter() - started
        # Move the season's end to just now: the events stay inside it (played two
        # hours before the original end, at most a few minutes before now is fine as
        # long as the new end is after them).
        end = max(datetime.now(UTC), played + timedelta(seconds=1))
        write_boards(end)
        time.sleep(
            max(0.0, (end + timedelta(seconds=1.2) - datetime.now(UTC)).total_seconds())
        )
        config = load_boards(boards_file)
        boards = [f"season:SB:{scope}" for scope in config.scopes]
        client = redis.Redis.from_url(server.url)
        names = season_keys(client, args.partitions, boards)
        season_bytes = memory_of(client, names)
        used_before = int(client.info("memory")["used_memory"])
        spark = get_spark("bench-season")
        started = time.perf_counter()
        steps: dict[str, float] = {}
        snapshot = close_season(settings, "SB", spark=spark, timings=steps)
        close_s = time.perf_counter() - started
        left = season_keys(client, args.partitions, boards)
        used_after = int(client.info("memory")["used_memory"])
        result: dict[str, Any] = {
            "players": args.players,
            "events": sent,
            "partitions": args.partitions,
            "ingest_seconds": round(ingest_s, 1),
            "close_seconds": round(close_s, 1),
            "close_steps": steps,
            "award_populations": snapshot.boards,
            "hash": snapshot.hash,
            "season_keys_before": len(names),
            "season_keys_after": len(left),
            "season_key_bytes_freed": season_bytes,
            "used_memory_before": used_before,
            "used_memory_after": used_after,
            "loadavg": os.getloadavg(),
        }
        print(json.dumps(result, indent=1))
        client.close()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
