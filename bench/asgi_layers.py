"""CPU per read of each layer of the API's ASGI stack, in process (no sockets).

    python -m bench.asgi_layers [--players N] [--reads R] [--kinds a,b]
                                [--read-auth open|token]

Set-up as bench/live_cpu.py's (its own redis-server, N players, a direct publish, a
few more events), then ``api.main:create_app`` in this process, its lifespan run,
and for each read kind R GETs of distinct players driven straight into the app at
three depths, each timed with ``time.process_time``:

- ``app``: the whole app (FastAPI's and Starlette's middlewares, ours, the router);
- ``router``: the router alone (``app.router``: route matching and the route);
- ``route``: the matched route's own ASGI app (Starlette's ``request_response``:
  the Request, the handler, the response's ``send``);
``send`` only notes the status at all three, so the differences are the layers'
Python, and what a real request costs beyond ``app`` is uvicorn's protocol, the
event loop and the kernel (bench/live_cpu.py measures the whole).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import stack_env
from bench.reads import (
    BOARD,
    READ_HEADERS,
    apply_events,
    player_id,
    publish_direct,
    use_read_auth,
)

KINDS = {
    "snapshot_rank": "/players/{p}?mode=snapshot",
    "live_rank": "/players/{p}",
    "approx_rank": "/players/{p}?mode=approx",
}


def scope_of(app: Any, path_qs: str) -> dict[str, Any]:
    path, _, query = path_qs.partition("?")
    headers = [(b"host", b"127.0.0.1")] + [
        (k.lower().encode(), v.encode()) for k, v in READ_HEADERS.items()
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
        "app": app,
        "state": {},
    }


def _channel() -> tuple[Any, Any, list[int]]:
    """An empty GET's ``receive`` and a ``send`` that only notes each answer's
    status (in the list returned with them)."""
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    return receive, send, statuses


async def drive(app: Any, target: Any, paths: list[str]) -> float:
    """CPU seconds of ``target`` answering every path (a fresh scope each)."""
    receive, send, statuses = _channel()

    scopes = [scope_of(app, p) for p in paths]
    t0 = time.process_time()
    for s in scopes:
        await target(s, receive, send)
    took = time.process_time() - t0
    assert set(statuses) == {200}, set(statuses)
    return took


async def measure(app: Any, reads: dict[str, list[str]], rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with app.router.lifespan_context(app):
        app.middleware_stack = app.build_middleware_stack()
        for kind, paths in reads.items():
            await drive(app, app, paths[:200])  # warm-up
            per: dict[str, list[float]] = {"app": [], "router": [], "route": []}
            for _ in range(rounds):
                per["app"].append(await drive(app, app, paths))
                per["router"].append(await drive(app, app.router, paths))
                per["route"].append(await drive_route(app, paths))
            n = len(paths)
            out[kind] = {depth: round(min(v) / n * 1e6, 1) for depth, v in per.items()}
            print(kind, out[kind], flush=True)
    return out


async def drive_route(app: Any, paths: list[str]) -> float:
    from starlette.routing import Match

    receive, send, statuses = _channel()

    prepared = []
    for p in paths:
        s = scope_of(app, p)
        # The gate's verified bearer, as api/middleware.py leaves it.
        from api.readers import refusal

        assert await refusal(s) is None
        for r in app.router.routes:
            match, child = r.matches(s)
            if match == Match.FULL:
                s.update(child)
                prepared.append((r.app, s))
                break
    t0 = time.process_time()
    for handler, s in prepared:
        await handler(s, receive, send)
    took = time.process_time() - t0
    assert set(statuses) == {200}, set(statuses)
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_layers")
    parser.add_argument("--players", type=int, default=20_000)
    parser.add_argument("--extra-events", type=int, default=1_000)
    parser.add_argument("--reads", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="snapshot_rank,live_rank")
    parser.add_argument("--read-auth", choices=("open", "token"), default="token")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    from speed.server import RedisServer

    data_dir = Path(tempfile.mkdtemp(prefix="lb-asgi-layers-"))
    env = stack_env(data_dir)
    server = RedisServer(data_dir / "redis", appendfsync="everysec").start()
    env["LB_REDIS_URL"] = server.url
    use_read_auth(env, args.read_auth)
    os.environ.update({k: v for k, v in env.items() if k.startswith("LB_")})
    try:
        rng = random.Random(args.seed)
        n = args.players
        points = np.array([rng.randrange(10_001) * 10 for _ in range(n)], np.int64)
        asyncio.run(
            apply_events(server.url, [(i, int(points[i])) for i in range(n)], "bulk")
        )
        publish_direct(server.url, points)
        changed = rng.sample(range(n), min(args.extra_events, n))
        more = [(i, (rng.randrange(10_000) + 1) * 10) for i in changed]
        asyncio.run(apply_events(server.url, more, "more"))
        base = f"/v1/boards/{BOARD}"
        reads = {
            kind: [
                base + KINDS[kind].format(p=player_id(rng.randrange(n)))
                for _ in range(args.reads)
            ]
            for kind in args.kinds.split(",")
        }
        from api.main import create_app

        app = create_app()
        out = asyncio.run(measure(app, reads, args.rounds))
        print(json.dumps(out, indent=1))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
