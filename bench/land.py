"""Landing: the seconds `lb publish` spends moving the partition logs into bronze.

    python -m bench.land [--partitions 8] [--big 20000] [--small 100] [--rounds 6]

Starts its own Redis, writes each partition's log directly (``XADD <position>-0 r
<record>``, as apply_event.lua logs, no API), and times ``jobs.land.run_land`` with
Spark as `lb publish` starts it (``get_spark``: production settings): first one
landing of ``--big`` records per partition (the first publish after a while), then
``--rounds`` landings of ``--small`` records per partition (a publish every few
minutes). Checks each landing's boundary against the positions written. Prints the
seconds of each landing and the load; a JSON line for the record.

To time another code tree with this script (``git worktree add /tmp/old <rev>``):
``PYTHONPATH=/tmp/old python bench/land.py`` (run as a file, the script's own folder
comes first on ``sys.path``, then the other tree's packages).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import redis

from conf.settings import Settings
from jobs.land import run_land
from jobs.spark import get_spark
from speed.partitions import Keys
from speed.server import RedisServer


def record(partition: int, position: int) -> bytes:
    """A log record of the shape apply_event.lua writes (fields the lander parses)."""
    return json.dumps(
        {
            "partition": partition,
            "position": position,
            "receivedAtMs": 1_764_000_000_000 + position,
            "status": "accepted",
            "event": {
                "eventId": f"E{partition}-{position}",
                "playerId": f"p{position % 5000}",
                "matchId": f"M{position}",
                "sourceRevision": 1,
                "occurredAt": "2026-11-20T10:00:00Z",
                "region": "eu",
                "points": position % 100,
            },
        }
    ).encode()


def write_log(client: redis.Redis, partition: int, first: int, count: int) -> None:
    keys = Keys(partition)
    pipe = client.pipeline(transaction=False)
    for position in range(first, first + count):
        pipe.xadd(keys.log, {"r": record(partition, position)}, id=f"{position}-0")
        if position % 5_000 == 0:
            pipe.execute()
    pipe.set(keys.position, first + count - 1)
    pipe.execute()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--big", type=int, default=20_000)
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-land-"))
    server = RedisServer(work / "redis").start()
    client = redis.Redis.from_url(server.url)
    settings = Settings(
        redis_url=server.url, data_dir=work / "lb", partitions=args.partitions
    )
    spark = get_spark("bench-land")
    try:
        last = dict.fromkeys(range(args.partitions), 0)
        seconds: dict[str, list[float]] = {"big": [], "small": []}
        for label, count, rounds in (
            ("big", args.big, 1),
            ("small", args.small, args.rounds),
        ):
            for _ in range(rounds):
                for partition in last:
                    write_log(client, partition, last[partition] + 1, count)
                    last[partition] += count
                started = time.perf_counter()
                landed = run_land(settings, spark)
                seconds[label].append(round(time.perf_counter() - started, 2))
                if landed != last:
                    raise SystemExit(f"landed {landed}, written {last}")
                print(f"{label}: {count} x {args.partitions}: {seconds[label][-1]} s")
        # The first small landing still warms the JVM up: the median of the rest.
        warm = seconds["small"][1:] or seconds["small"]
        print(
            json.dumps(
                {
                    "command": "python -m bench.land "
                    + " ".join(f"--{k} {v}" for k, v in vars(args).items()),
                    "load_start": [round(x, 2) for x in load_start],
                    "load_end": [round(x, 2) for x in os.getloadavg()],
                    "seconds": seconds,
                    "small_warm_median_s": statistics.median(warm),
                }
            )
        )
    finally:
        client.close()
        server.stop()
        spark.stop()


if __name__ == "__main__":
    main()
