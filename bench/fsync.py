"""Speed layer alone under different AOF fsync policies (diagnostic, not `make bench`).

    python -m bench.fsync [--events N] always everysec always everysec

For each policy given, in order: a fresh redis-server (unix socket, AOF on, that
policy) in a temp dir, then ``SpeedLayer.apply`` on pre-validated batches of 1000
over 4 concurrent tasks (bench.ingest's phase d,
:func:`bench.harness.bench_speed_layer`). Alternate the policies to see how much of
the difference is noise on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import redis

from bench.harness import EventFactory, bench_speed_layer
from speed.server import RedisServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fsync", description=__doc__)
    parser.add_argument("policies", nargs="+", choices=("always", "everysec", "no"))
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args(argv)
    for policy in args.policies:
        data = Path(tempfile.mkdtemp(prefix="lb-fsync-"))
        server = RedisServer(data, unix_socket=True, appendfsync=policy).start()
        try:
            factory = EventFactory(100_000, 7, datetime.now(UTC))
            result = asyncio.run(
                bench_speed_layer(server.url, factory, args.events, 1000, 4)
            )
            client = redis.Redis.from_url(server.url)
            evalsha = client.info("commandstats")["cmdstat_evalsha"]
            client.close()
            print(
                f"appendfsync {policy:8s} "
                f"{result['accepted_per_s']:8.1f} accepted ev/s  "
                f"EVALSHA {evalsha['usec_per_call']} us/call  "
                f"batch p50 {result['latency_per_batch']['p50_ms']} ms",
                flush=True,
            )
        finally:
            server.stop()
            shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
