"""The yardstick: the leaderboard service a team writes first (seed 004's MVP).

    python -m bench.naive_mvp [--events N] [--concurrency C] [--players P]

FastAPI + redis-py, nothing else: an HMAC check of the same signature scheme as
ours, ``SET NX`` per event for dedupe, ``ZINCRBY`` on each of the event's 10 boards
in one ``MULTI``, a Redis with AOF and ``appendfsync always``, two uvicorn workers.
It has no revisions, no log, no changed-sets, no approximate ranks and no
exactly-once across a crash between its two round trips (an event whose dedupe key
was set but whose ``MULTI`` never ran is lost): that is what makes it the number a
user compares us with, not a design to copy.

Per batch it makes two round trips, each as cheap as the naive design allows: one
pipeline of ``SET NX`` for every event of the batch, then one ``MULTI``/``EXEC``
with the ten ``ZINCRBY`` of each event that was new. Doing it event by event would
be slower and a weaker yardstick.

``bench.ingest`` runs it in the same run as our stack and prints the ratio; this
module also runs alone (``main``). The server side imports nothing of the project:
the ASGI app is :func:`create_app`, started by uvicorn with ``--factory``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
from fastapi import FastAPI, HTTPException, Request, Response

SEASON = "BENCH"
SIGNATURE_TOLERANCE_S = 300


def board_ids(occurred_at: str, region: str) -> list[str]:
    """The ten boards an event feeds: season, daily, weekly, monthly, all-time, each
    global and for the event's region (the same boards as ours in the bench)."""
    moment = datetime.fromisoformat(occurred_at.replace("Z", "+00:00"))
    iso = moment.isocalendar()
    windows = (
        f"season:{SEASON}",
        f"daily:{moment:%Y-%m-%d}",
        f"weekly:{iso.year}-W{iso.week:02d}",
        f"monthly:{moment:%Y-%m}",
        "alltime:all",
    )
    return [f"naive:b:{w}:{scope}" for w in windows for scope in ("global", region)]


def create_app() -> Any:
    """The naive service as an ASGI app (env: NAIVE_REDIS_URL, NAIVE_KEYS)."""
    url = os.environ.get("NAIVE_REDIS_URL", "redis://127.0.0.1:6379/0")
    keys = dict(
        item.split(":", 1)
        for item in os.environ.get("NAIVE_KEYS", "dev:dev-secret").split(",")
    )
    app = FastAPI()
    client = aioredis.Redis.from_url(url)

    def check_signature(key_id: str | None, signature: str | None, body: bytes) -> None:
        if key_id not in keys or not signature:
            raise HTTPException(401, "unsigned")
        parts = dict(p.split("=", 1) for p in signature.split(",") if "=" in p)
        t, mac = parts.get("t", ""), parts.get("v1", "")
        if not t.isdigit() or abs(time.time() - int(t)) > SIGNATURE_TOLERANCE_S:
            raise HTTPException(401, "stale signature")
        want = hmac.new(keys[key_id].encode(), f"{t}.".encode() + body, hashlib.sha256)
        if not hmac.compare_digest(want.hexdigest(), mac):
            raise HTTPException(401, "bad signature")

    @app.post("/v1/score-events:batch")
    async def submit_batch(request: Request) -> Response:
        body = await request.body()
        check_signature(
            request.headers.get("x-key-id"), request.headers.get("x-signature"), body
        )
        events = orjson.loads(body)["events"]
        dedupe = client.pipeline(transaction=False)
        for e in events:
            dedupe.set(f"naive:e:{e['playerId']}:{e['eventId']}", 1, nx=True)
        fresh = await dedupe.execute()
        apply = client.pipeline(transaction=True)
        named: list[list[str]] = []
        for e, new in zip(events, fresh, strict=True):
            boards = board_ids(e["occurredAt"], e["region"]) if new else []
            for board in boards:
                apply.zincrby(board, int(e["result"]["points"]), e["playerId"])
            named.append(boards)
        totals = iter(await apply.execute() if len(apply) else [])
        results = [
            {
                "eventId": e["eventId"],
                "playerId": e["playerId"],
                "status": "accepted" if boards else "duplicate",
                "boards": [
                    {"board": b.removeprefix("naive:b:"), "total": int(next(totals))}
                    for b in boards
                ],
            }
            for e, boards in zip(events, named, strict=True)
        ]
        return Response(
            orjson.dumps({"results": results}), media_type="application/json"
        )

    return app


class NaiveStack:
    """A redis-server (AOF, fsync always) and two uvicorn workers of the naive app on
    loopback, in a temporary directory; a context manager that stops both."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self.dir = Path(tempfile.mkdtemp(prefix="naive-mvp-"))
        self.redis_port = _free_port()
        self.api_port = _free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def pids(self) -> dict[str, int]:
        return {"redis": self.procs[0].pid, "api": self.procs[1].pid}

    def __enter__(self) -> NaiveStack:
        import httpx
        import redis

        self.procs.append(
            subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(self.redis_port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(self.dir),
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                    "--save",
                    "",
                ],
                stdout=subprocess.DEVNULL,
            )
        )
        env = dict(os.environ, NAIVE_REDIS_URL=self.redis_url)
        self.procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "bench.naive_mvp:create_app",
                    "--factory",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.api_port),
                    "--workers",
                    str(self.workers),
                    "--no-access-log",
                    "--log-level",
                    "warning",
                ],
                env=env,
            )
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=self.redis_port).ping()
                httpx.get(self.url + "/openapi.json", timeout=1).raise_for_status()
                return self
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("the naive service did not start within 30 s")

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def measure(
    url: str, events: int, concurrency: int, players: int, max_seconds: float = 60.0
) -> dict[str, Any]:
    """Accepted events/s of the naive service: the same batches, client and checks as
    our bench (``bench.ingest.bench_batch``), so the two figures compare."""
    from bench.harness import EventFactory, Verify
    from bench.ingest import bench_batch

    factory = EventFactory(players, seed=7, now=datetime.now(UTC))
    return await bench_batch(
        url,
        factory,
        events,
        1000,
        concurrency,
        max_seconds,
        "httpx",
        verify=Verify(require_position=False),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--players", type=int, default=100_000)
    args = p.parse_args(argv)
    with NaiveStack() as stack:
        report = asyncio.run(
            measure(stack.url, args.events, args.concurrency, args.players)
        )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
