"""The cost of LB_REPLICA_ACKS: the speed layer with and without WAIT, on a local
Redis Cluster of three masters with one replica each, for docs/CAPACITY.md.

    python -m bench.replica_acks [--events 2000] [--concurrency 32] [--rounds 2]

Every node runs AOF with ``appendfsync always`` like `lb up`. Events go straight
through ``SpeedLayer.apply`` (no HTTP), three shapes per setting:

* ``sequential``: one event at a time (latency of one acknowledged write: p50/p99);
* ``concurrent``: ``--concurrency`` single-event callers at once (group commit
  joins them: events/s);
* ``batch``: batches of 500 events (events/s; one WAIT per master per batch).

The settings alternate (N=0, N=1, N=0, N=1, ... for ``--rounds``) so a change of the
machine's load hits both; the load average is printed before and after. Prints one
JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from api.routes.score_events import validate_event
from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.cluster_server import RedisClusterServer
from speed.connection import async_client
from speed.events import NormalizedEvent
from speed.store import SpeedLayer

BATCH = 500
PLAYERS = 5000


def _events(prefix: str, count: int, seed: int) -> list[NormalizedEvent]:
    settings = Settings(rate_limit="off")
    boards = load_boards(settings.boards_file)
    rules = default_registry()
    rng = random.Random(seed)
    now = datetime.now(UTC)
    moment = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        validate_event(
            {
                "eventId": f"{prefix}{n}",
                "playerId": f"P{(p := rng.randrange(PLAYERS))}",
                "matchId": f"{prefix}m{n}",
                "sourceRevision": 1,
                "occurredAt": moment,
                "region": ("eu", "na")[p % 2],
                "result": {"points": rng.randrange(0, 1000)},
                "kind": "result",
                "reason": None,
            },
            settings,
            boards,
            now,
            rules,
        )
        for n in range(count)
    ]


def _accepted(outcomes: list[Any]) -> int:
    return sum(
        1 for o in outcomes if o.body is not None and o.body["status"] == "accepted"
    )


async def _run(
    url: str, acks: int, prefix: str, events: int, concurrency: int, seed: int
) -> dict[str, Any]:
    settings = Settings(rate_limit="off")
    boards = load_boards(settings.boards_file)
    client = async_client(url, max_connections=64)
    speed = SpeedLayer(
        client, boards, settings.partitions, settings.retention_seconds, None
    )
    if acks:
        speed.replica_wait = (acks, 1000)
    result: dict[str, Any] = {"acks": acks}
    try:
        # Loads the script on every master, outside the measurement.
        await speed.apply(_events(f"{prefix}w", 16, seed))

        one = _events(f"{prefix}s", events, seed + 1)
        latencies = []
        started = time.perf_counter()
        accepted = 0
        for e in one:
            t = time.perf_counter()
            accepted += _accepted(await speed.apply([e]))
            latencies.append((time.perf_counter() - t) * 1000)
        elapsed = time.perf_counter() - started
        latencies.sort()
        result["sequential"] = {
            "events": accepted,
            "events_per_s": round(accepted / elapsed, 1),
            "p50_ms": round(statistics.median(latencies), 3),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 3),
        }

        many = _events(f"{prefix}c", events * 2, seed + 2)
        queue = iter(many)
        counts = [0]

        async def caller() -> None:
            for e in queue:
                done = _accepted(await speed.apply([e]))
                counts[0] += done

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        result["concurrent"] = {
            "events": counts[0],
            "callers": concurrency,
            "events_per_s": round(counts[0] / elapsed, 1),
        }

        batched = _events(f"{prefix}b", events * 5, seed + 3)
        started = time.perf_counter()
        accepted = 0
        for first in range(0, len(batched), BATCH):
            accepted += _accepted(await speed.apply(batched[first : first + BATCH]))
        elapsed = time.perf_counter() - started
        result["batch"] = {
            "events": accepted,
            "batch": BATCH,
            "events_per_s": round(accepted / elapsed, 1),
        }
    finally:
        await client.aclose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-replica-acks-") as tmp:
        cluster = RedisClusterServer(
            Path(tmp), masters=3, replicas=1, appendfsync="always"
        ).start()
        try:
            runs = []
            for r in range(args.rounds):
                for acks in (0, 1):
                    runs.append(
                        asyncio.run(
                            _run(
                                cluster.url,
                                acks,
                                f"r{r}a{acks}",
                                args.events,
                                args.concurrency,
                                args.seed + 10 * r,
                            )
                        )
                    )
        finally:
            cluster.stop()
    print(
        json.dumps(
            {
                "masters": 3,
                "replicas_per_master": 1,
                "appendfsync": "always",
                "cpus": os.cpu_count(),
                "loadavg_before": [round(x, 2) for x in load_before],
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
