"""Read latency with LB_READ_AUTH=token against open reads (issue 26: read p99 at
1,000 requests/s within 10 ms with auth), measured from outside on loopback.

    python -m bench.read_auth [--players N] [--rate R] [--seconds S] [--tokens T]

For each configuration -- ``open``; ``token`` (every read carries one of T player
tokens); ``token+limit`` (the same, with LB_READ_RATE_LIMIT high enough never to
refuse, so each read also spends a bucket token in Redis) -- a fresh stack (`lb up`,
the bench boards, default workers) gets N players through signed batches, then live
``top?limit=100`` and live ``players/{id}`` are read open-loop at R requests/s for S
seconds each (latency from each request's scheduled send time, aiohttp on the same
cores). Only live reads: a snapshot needs a Spark publish, which is not what changes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from api.tokens import issue_player_token
from bench.harness import (
    BENCH_SEASON,
    EventFactory,
    free_port,
    loadavg,
    report_head,
    signed,
    stack_env,
    start_stack,
    stop_stack,
    summarize_ms,
)
from conf.settings import LOCAL_PLAYER_TOKEN_KEY

BOARD = f"season:{BENCH_SEASON}:global"
CONFIGS: dict[str, dict[str, str]] = {
    "open": {"LB_READ_AUTH": "open"},
    "token": {"LB_READ_AUTH": "token"},
    "token+limit": {"LB_READ_AUTH": "token", "LB_READ_RATE_LIMIT": "1000000/0.000001"},
}


def load(url: str, players: int) -> None:
    factory = EventFactory(players, seed=26, now=datetime.now(UTC))
    with httpx.Client(timeout=60) as client:
        for b in range(0, players, 1000):
            events = [factory.event(f"b{b}") for _ in range(min(1000, players - b))]
            body = orjson.dumps({"events": events})
            reply = client.post(
                f"{url}/v1/score-events:batch", content=body, headers=signed(body)
            )
            reply.raise_for_status()


async def open_loop(
    url_of: Any, headers_of: Any, rate: float, seconds: float
) -> dict[str, Any]:
    import aiohttp

    count = int(rate * seconds)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=256),
        timeout=aiohttp.ClientTimeout(total=30),
    ) as session:

        async def one(k: int, scheduled: float) -> None:
            try:
                async with session.get(url_of(k), headers=headers_of(k)) as reply:
                    await reply.read()
                    status = reply.status
            except (TimeoutError, aiohttp.ClientError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                return
            if status != 200:
                errors[f"http {status}"] = errors.get(f"http {status}", 0) + 1
                return
            latencies.append(loop.time() - scheduled)

        # Warm the connections and the token cache first (not measured).
        await asyncio.gather(*(one(k, loop.time()) for k in range(200)))
        latencies.clear()
        tasks = []
        t0 = loop.time() + 0.05
        for k in range(count):
            scheduled = t0 + k / rate
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(k, scheduled)))
        await asyncio.gather(*tasks)
    summary = summarize_ms(latencies)
    return {"sent": count, "ok": len(latencies), "errors": errors, **summary}


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lb-bench-auth-") as tmp:
        data_dir = Path(tmp) / "lb"
        env = stack_env(data_dir)
        env.pop("LB_READ_RATE_LIMIT", None)
        env["LB_PLAYER_TOKEN_KEY"] = LOCAL_PLAYER_TOKEN_KEY
        env.update(CONFIGS[name])
        url, _, _ = start_stack(env, data_dir, free_port())
        try:
            load(url, args.players)
            rng = random.Random(7)
            players = [f"P{rng.randrange(args.players)}" for _ in range(4096)]
            secret = LOCAL_PLAYER_TOKEN_KEY.encode()
            tokens = [
                {"Authorization": f"Bearer {issue_player_token(secret, f'T{i}')}"}
                for i in range(args.tokens)
            ]

            def headers_of(k: int) -> dict[str, str]:
                return tokens[k % len(tokens)] if name != "open" else {}

            result: dict[str, Any] = {"loadavg_before": loadavg()}
            for endpoint, url_of in (
                ("live_top100", lambda k: f"{url}/v1/boards/{BOARD}/top?limit=100"),
                (
                    "live_rank",
                    lambda k: f"{url}/v1/boards/{BOARD}/players/{players[k % 4096]}",
                ),
            ):
                result[endpoint] = asyncio.run(
                    open_loop(url_of, headers_of, args.rate, args.seconds)
                )
                print(name, endpoint, json.dumps(result[endpoint]), flush=True)
            result["loadavg_after"] = loadavg()
            return result
        finally:
            stop_stack(env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    report = report_head("read_auth", argv, args, "live reads, open vs token")
    started = time.monotonic()
    for name in args.configs.split(","):
        report[name] = measure(name, args)
    report["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
