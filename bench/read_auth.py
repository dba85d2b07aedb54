"""Read latency with LB_READ_AUTH=token against open reads (issue 26: read p99 at
1,000 requests/s within 10 ms with auth), measured from outside on loopback.

    python -m bench.read_auth [--players N] [--rate R] [--seconds S] [--tokens T]

One stack per configuration, all running at once -- ``open``; ``token`` (every read
carries one of T player tokens); ``token+limit`` (the same, with LB_READ_RATE_LIMIT
high enough never to refuse, so each read also spends a bucket token in Redis) --
each a fresh `lb up` (the bench boards, default workers) with N players loaded
through signed batches. Then live ``top?limit=100`` and live ``players/{id}`` are
read open-loop at R requests/s in all, for S seconds each, request k going to stack
``k % 3``: the configurations share every moment of the machine's load, so their
difference is the gate's, even on a busy machine (latency from each request's
scheduled send time, aiohttp on the same cores). Only live reads: a snapshot needs
a Spark publish, and the gate is the same for every read. Also timed alone: what
the gate adds per read (:func:`components`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from api.tokens import issue_player_token, issue_reader_token
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
    targets: list[tuple[Any, Any]], rate: float, seconds: float
) -> list[dict[str, Any]]:
    """``rate * seconds`` GETs at their scheduled times, request k to target
    ``k % len(targets)`` (each a (url_of, headers_of) pair), so every configuration
    sees the same moments of the machine's load; latency from the schedule."""
    import aiohttp

    count = int(rate * seconds)
    n = len(targets)
    latencies: list[list[float]] = [[] for _ in targets]
    errors: list[dict[str, int]] = [{} for _ in targets]
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=256),
        timeout=aiohttp.ClientTimeout(total=30),
    ) as session:

        async def one(k: int, scheduled: float) -> None:
            url_of, headers_of = targets[k % n]
            mine = errors[k % n]
            try:
                async with session.get(url_of(k), headers=headers_of(k)) as reply:
                    await reply.read()
                    status = reply.status
            except (TimeoutError, aiohttp.ClientError) as exc:
                mine[type(exc).__name__] = mine.get(type(exc).__name__, 0) + 1
                return
            if status != 200:
                mine[f"http {status}"] = mine.get(f"http {status}", 0) + 1
                return
            latencies[k % n].append(loop.time() - scheduled)

        # Warm the connections and the token caches first (not measured).
        await asyncio.gather(*(one(k, loop.time()) for k in range(200 * n)))
        for kept in latencies:
            kept.clear()
        tasks = []
        t0 = loop.time() + 0.05
        for k in range(count):
            scheduled = t0 + k / rate
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(k, scheduled)))
        await asyncio.gather(*tasks)
    return [
        {"ok": len(kept), "errors": failed, **summarize_ms(kept)}
        for kept, failed in zip(latencies, errors, strict=True)
    ]


def start(name: str, tmp: Path, players: int) -> tuple[str, dict[str, str], list[str]]:
    """A stack of configuration ``name`` with ``players`` players: its URL, its
    environment (for `lb down`) and ids of players on the board."""
    data_dir = tmp / name.replace("+", "-") / "lb"
    env = stack_env(data_dir)
    env.pop("LB_READ_RATE_LIMIT", None)
    env["LB_PLAYER_TOKEN_KEY"] = LOCAL_PLAYER_TOKEN_KEY
    env.update(CONFIGS[name])
    url, _, _ = start_stack(env, data_dir, free_port())
    try:
        load(url, players)
        reader = issue_reader_token(LOCAL_PLAYER_TOKEN_KEY.encode(), "bench")
        top = httpx.get(
            f"{url}/v1/boards/{BOARD}/top",
            params={"limit": 1000},
            headers={"Authorization": f"Bearer {reader}"},
            timeout=30,
        ).json()
    except Exception:
        stop_stack(env)
        raise
    return url, env, [e["playerId"] for e in top["entries"]]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    names = args.configs.split(",")
    secret = LOCAL_PLAYER_TOKEN_KEY.encode()
    tokens = [
        {"Authorization": f"Bearer {issue_player_token(secret, f'T{i}')}"}
        for i in range(args.tokens)
    ]
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lb-bench-auth-") as tmp:
        stacks: list[tuple[str, dict[str, str], list[str]]] = []
        try:
            for name in names:
                stacks.append(start(name, Path(tmp), args.players))
            rng = random.Random(7)

            def target(name: str, url: str, players: list[str], kind: str) -> Any:
                chosen = [rng.choice(players) for _ in range(4096)]

                def url_of(k: int) -> str:
                    if kind == "top":
                        return f"{url}/v1/boards/{BOARD}/top?limit=100"
                    return f"{url}/v1/boards/{BOARD}/players/{chosen[k % 4096]}"

                def headers_of(k: int) -> dict[str, str]:
                    return tokens[k % len(tokens)] if name != "open" else {}

                return url_of, headers_of

            report["loadavg_before"] = loadavg()
            for endpoint, kind in (("live_top100", "top"), ("live_rank", "rank")):
                targets = [
                    target(name, url, players, kind)
                    for name, (url, _, players) in zip(names, stacks, strict=True)
                ]
                results = asyncio.run(open_loop(targets, args.rate, args.seconds))
                for name, result in zip(names, results, strict=True):
                    report.setdefault(name, {})[endpoint] = result
                    print(name, endpoint, json.dumps(result), flush=True)
            report["loadavg_after"] = loadavg()
        finally:
            for _, env, _ in stacks:
                stop_stack(env)
    return report


def components(rounds: int = 20_000) -> dict[str, float]:
    """Microseconds per read of what the gate adds: a remembered token's check, a
    first sighting's HS256 verification, and the rate limit's Redis round trip
    (one EVALSHA of take_token.lua on a local redis-server)."""
    from api.tokens import TokenVerifier
    from speed.connection import async_client
    from speed.readers import ReadLimiter
    from speed.server import RedisServer

    secret = LOCAL_PLAYER_TOKEN_KEY.encode()
    raw = issue_reader_token(secret, "bench")
    header = f"Bearer {raw}"
    verifier = TokenVerifier(secret)
    verifier.verify(header)
    started = time.perf_counter()
    for _ in range(rounds):
        verifier.verify(header)
    cached = (time.perf_counter() - started) / rounds * 1e6
    fresh = [f"Bearer {issue_player_token(secret, f'F{i}')}" for i in range(2000)]
    started = time.perf_counter()
    for value in fresh:
        verifier.verify(value)
    first = (time.perf_counter() - started) / len(fresh) * 1e6

    async def round_trips(url: str) -> tuple[float, float]:
        """CPU per take: the limiter's, and redis-py's ``Script`` call of the same
        script (what it sent before), alternated in blocks."""
        from speed.readers import read_rate_key
        from speed.scripts import TAKE_TOKEN

        client = async_client(url)
        limiter = ReadLimiter(client, (10**9, 1e-6))
        await limiter.take("warm")

        async def script_call(subject: str) -> None:
            await limiter._take(
                keys=[read_rate_key(subject)],
                args=TAKE_TOKEN.args_of(
                    {
                        "now_ms": int(time.time() * 1000),
                        "capacity": limiter.capacity,
                        "refill_ms": limiter.refill_ms,
                    }
                ),
            )

        spent: dict[str, list[float]] = {"take": [], "script": []}
        for block in range(10):
            for name in ("take", "script") if block % 2 else ("script", "take"):
                call = limiter.take if name == "take" else script_call
                started = time.process_time()
                for i in range(500):
                    await call(f"reader:{i % 100}")
                spent[name].append((time.process_time() - started) / 500 * 1e6)
        await client.aclose()
        return statistics.median(spent["take"]), statistics.median(spent["script"])

    with tempfile.TemporaryDirectory(prefix="lb-bench-auth-redis-") as tmp:
        server = RedisServer(Path(tmp), appendfsync="no").start()
        try:
            take, script = asyncio.run(round_trips(server.url))
        finally:
            server.stop()
    return {
        "verify_remembered_us": round(cached, 2),
        "verify_first_us": round(first, 2),
        "rate_limit_take_cpu_us": round(take, 1),
        "rate_limit_script_call_cpu_us": round(script, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--components-only",
        action="store_true",
        help="only time what the gate adds per read (no stack)",
    )
    args = parser.parse_args(argv)
    report = report_head("read_auth", argv, args, "live reads, open vs token, paired")
    started = time.monotonic()
    report["components"] = components()
    print(json.dumps(report["components"]), flush=True)
    if not args.components_only:
        report.update(measure(args))
    report["seconds"] = round(time.monotonic() - started, 1)
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
