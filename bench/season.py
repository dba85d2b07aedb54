"""Season close benchmark: time of ``close_season`` and Redis bytes freed by dropping
the closed season's speed-layer keys.

    python -m bench.season --players 100000 --events 200000

1. Starts a private redis-server (AOF, ``appendfsync everysec`` to keep ingest
   short; durability is not what is measured) and a temp ``LB_DATA_DIR``.
2. A boards file with season ``SB`` (regions eu, na) ending a little after ingest,
   1 s of lateness; rolling windows stay open.
3. Applies the events through the API's ingest path (``validate_event``, then
   ``SpeedLayer.apply``: the owner transaction, as ``POST /v1/score-events:batch``
   does minus HTTP and signatures), ``--batch`` events per call, from ``--workers``
   processes with a connection each (every player gets at least one event, points
   in a small range; event i goes to worker i mod W).
4. After the close time: sums Redis' ``MEMORY USAGE`` of the season boards' keys
   (what dropping them frees), reads ``used_memory``, times ``close_season``
   (land + final publish + rebase + award snapshot + Delta ``gold_awards``), then
   checks the keys are gone and reads ``used_memory`` again.

Results go to stdout as JSON; progress to stderr. The load average is sampled every
10 s during the ingest and the close (min / max reported): the machine may be shared.

    python -m bench.season --players 1000000 --events 1000000 --workers 2 --batch 4000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
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
                keys.changed_counts(board),
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
    settings: Settings,
    players: int,
    events: int,
    played: datetime,
    worker: int = 0,
    workers: int = 1,
    batch_size: int = 1000,
) -> int:
    """Apply events ``worker``, ``worker + workers``, ... of the run; returns how
    many were sent."""
    boards = load_boards(settings.boards_file)
    client = aioredis.from_url(settings.redis_url or "", max_connections=8)
    layer = SpeedLayer(
        client, boards, settings.partitions, settings.retention_seconds, None
    )
    from conf.rules import default_registry
    from speed.events import validate_event

    rules = default_registry(settings.points_min, settings.points_max)
    rng = random.Random(8 + worker)
    now = datetime.now(UTC)
    batch = []
    sent = 0
    report = max(batch_size, events // workers // 20)
    started = time.perf_counter()
    for i in range(worker, events, workers):
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
        if len(batch) == batch_size:
            await _apply_all(layer, batch)
            sent += len(batch)
            batch = []
            if sent % report < batch_size:
                rate = sent / (time.perf_counter() - started)
                print(
                    f"worker {worker}: {sent} events, {rate:.0f}/s, "
                    f"load {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
    if batch:
        await _apply_all(layer, batch)
        sent += len(batch)
    await client.aclose()
    return sent


async def _apply_all(layer: SpeedLayer, batch: list[Any]) -> None:
    outcomes = await layer.apply(batch)
    failed = [o.error for o in outcomes if o.error is not None]
    if failed or len(outcomes) != len(batch):
        raise RuntimeError(f"{len(failed)} events refused, first: {failed[:1]}")


def _ingest_worker(
    settings: Settings,
    players: int,
    events: int,
    played: datetime,
    worker: int,
    workers: int,
    batch_size: int,
) -> int:
    return asyncio.run(
        ingest(settings, players, events, played, worker, workers, batch_size)
    )


def ingest_parallel(
    settings: Settings,
    players: int,
    events: int,
    played: datetime,
    workers: int,
    batch_size: int,
) -> int:
    """:func:`ingest` split over ``workers`` processes (one owner-transaction
    client each: Redis runs the scripts, the processes build and validate)."""
    if workers <= 1:
        return asyncio.run(ingest(settings, players, events, played, 0, 1, batch_size))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [
            pool.submit(
                _ingest_worker,
                settings,
                players,
                events,
                played,
                w,
                workers,
                batch_size,
            )
            for w in range(workers)
        ]
        return sum(f.result() for f in futures)


class LoadSampler:
    """``os.getloadavg()`` every ``every`` seconds in a thread, per named phase."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.samples: dict[str, list[float]] = {}
        self.phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.setdefault(self.phase, []).append(os.getloadavg()[0])
            if self._stop.wait(self.every):
                return

    def start(self, phase: str) -> LoadSampler:
        self.phase = phase
        self._thread.start()
        return self

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.samples.setdefault(phase, []).append(os.getloadavg()[0])

    def stop(self) -> dict[str, list[float]]:
        self._stop.set()
        self._thread.join()
        return {
            phase: [round(min(v), 2), round(max(v), 2)]
            for phase, v in self.samples.items()
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--players", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--workers", type=int, default=1, help="ingest processes (default 1)"
    )
    parser.add_argument(
        "--batch", type=int, default=1000, help="events per apply call (default 1000)"
    )
    args = parser.parse_args()
    from jobs.publish import land_inputs
    from jobs.season import close_season
    from jobs.spark import get_spark

    steps: dict[str, float] = {}

    def stop(signum: int, frame: Any) -> None:
        # A bounded run (`timeout`) stopped: say how far the close got, then let the
        # finally below stop Redis and remove the temp dir.
        print(
            f"stopped by signal {signum}; close steps so far: {steps}", file=sys.stderr
        )
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
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
        load = LoadSampler().start("ingest")
        started = time.perf_counter()
        sent = ingest_parallel(
            settings, args.players, args.events, played, args.workers, args.batch
        )
        ingest_s = time.perf_counter() - started
        print(f"ingest done: {sent} events in {ingest_s:.1f} s", file=sys.stderr)
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
        load.enter("spark start")
        spark = get_spark("bench-season")
        load.enter("close")
        print(
            f"close starts: season keys {len(names)}, {season_bytes} B, "
            f"used_memory {used_before}",
            file=sys.stderr,
            flush=True,
        )
        started = time.perf_counter()
        snapshot = close_season(settings, "SB", spark=spark, timings=steps)
        close_s = time.perf_counter() - started
        left = season_keys(client, args.partitions, boards)
        used_after = int(client.info("memory")["used_memory"])
        # What the close no longer repeats inside its final publish (it lands once):
        # a landing pass that finds nothing new (bronze's landed-through scan, the
        # partition logs, audit and award versions).
        load.enter("repeat landing pass")
        started = time.perf_counter()
        land_inputs(settings, spark)
        repeat_s = time.perf_counter() - started
        loads = load.stop()
        result: dict[str, Any] = {
            "players": args.players,
            "events": sent,
            "partitions": args.partitions,
            "workers": args.workers,
            "batch": args.batch,
            "commit": _commit(),
            "ingest_seconds": round(ingest_s, 1),
            "ingest_events_per_second": round(sent / ingest_s),
            "close_seconds": round(close_s, 1),
            "close_steps": {k: round(v, 3) for k, v in steps.items()},
            "repeat_landing_pass_seconds": round(repeat_s, 1),
            "award_populations": snapshot.boards,
            "hash": snapshot.hash,
            "season_keys_before": len(names),
            "season_keys_after": len(left),
            "season_key_bytes_freed": season_bytes,
            "used_memory_before": used_before,
            "used_memory_after": used_after,
            "loadavg_end": os.getloadavg(),
            "loadavg_min_max": loads,
        }
        print(json.dumps(result, indent=1))
        client.close()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


if __name__ == "__main__":
    main()
