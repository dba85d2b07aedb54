"""CPU per live read (API process and Redis), code variants alternated in one run.

    python -m bench.live_cpu [--players N] [--extra-events M] [--reads R]
                             [--connections C] [--rounds K] [--kinds a,b]
                             [--variant NAME=DIR ...] [--out FILE]

Set-up, once (not measured): a redis-server of its own (AOF, fsync everysec) in a
temporary LB_DATA_DIR with the bench boards (bench/harness.py stack_env); N players,
one event each, through ``SpeedLayer.apply`` (bench/reads.py apply_events); a
generation published straight from those totals and rebased onto
(bench/reads.py publish_direct); then M more events for M distinct players, so the
changed-sets hold ~M players.

Measured, K rounds: in each round every variant (``--variant NAME=DIR``: a source
tree, e.g. a detached worktree of main; default: this tree as "new") in turn starts
one uvicorn process (``api.main:create_app`` with ``PYTHONPATH=DIR``, no workers)
on that data, warms up, and for each kind of read fires R closed-loop GETs over C
keep-alive connections (aiohttp): live rank, live nearby?radius=5, dense live
rank (?ranking=dense), live top?limit=100. Around each kind it reads the API
process's and Redis' CPU (/proc/<pid>/stat utime+stime) and Redis'
``INFO commandstats`` after ``CONFIG RESETSTAT``: per read, API CPU µs, Redis CPU
µs, Redis usec and calls of EVALSHA, and calls of every command (those run by
scripts too). The same
players are read by every variant; the bodies of the first reads of each kind are
compared across variants (they must be equal: same data, no writes during reads).
Variants alternate inside each round so that a shared machine's drift falls on
all of them alike; the report is per round and the median over rounds. With
``--interleave N`` every variant's API runs at once and each kind's reads go in
chunks of N to each variant in turn (order alternating), each chunk metered on its
own: the drift then falls on all variants within seconds, not minutes (no
commandstats then, only CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import redis

from bench.harness import (
    _proc_cpu,
    free_port,
    loadavg,
    stack_env,
    start_api,
    stop_api,
    wait_api,
)
from bench.reads import (
    BOARD,
    READ_HEADERS,
    apply_events,
    player_id,
    publish_direct,
    use_read_auth,
)

HERE = Path(__file__).resolve().parent.parent
KINDS = {
    "live_rank": "/players/{p}",
    "live_nearby5": "/players/{p}/nearby?radius=5",
    "live_rank_dense": "/players/{p}?ranking=dense",
    "live_top100": "/top?limit=100",
    "approx_rank": "/players/{p}?mode=approx",
    "snapshot_rank": "/players/{p}?mode=snapshot",
    # Why a rank changed (issue 27): needs g2, published from the live totals
    # after the extra events when this kind is asked for.
    "history": "/players/{p}/history",
}
# What every good answer of a kind holds.
BASIS = {
    "history": b'"basis":"snapshot"',
    "approx_rank": b'"basis":"histogram"',
    "snapshot_rank": b'"basis":"snapshot"',
}
LIVE = b'"basis":"live"'
# Bodies compared across variants, per kind.
COMPARED = 50


async def fire(
    base: str, paths: list[str], connections: int, kind: str = ""
) -> tuple[list[bytes], int]:
    """GET every path, ``connections`` at a time (closed loop): the bodies of the
    first COMPARED in order, and how many answers were not 200 or not of the
    kind's basis (live unless :data:`BASIS` says otherwise)."""
    import aiohttp

    bodies: list[bytes] = [b""] * min(COMPARED, len(paths))
    bad = 0
    queue = list(enumerate(paths))
    queue.reverse()
    async with aiohttp.ClientSession(
        headers=READ_HEADERS, connector=aiohttp.TCPConnector(limit=connections)
    ) as session:

        async def lane() -> None:
            nonlocal bad
            while queue:
                k, path = queue.pop()
                async with session.get(base + path) as reply:
                    body = await reply.read()
                    if reply.status != 200 or BASIS.get(kind, LIVE) not in body:
                        bad += 1
                if k < len(bodies):
                    bodies[k] = body

        await asyncio.gather(*(lane() for _ in range(connections)))
    return bodies, bad


def commandstats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """(calls, usec) per command since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }


def measure_variant(
    name: str,
    directory: Path,
    env: dict[str, str],
    client: redis.Redis,
    redis_pid: int,
    reads: dict[str, list[str]],
    args: argparse.Namespace,
    log: Path,
) -> tuple[dict[str, Any], dict[str, list[bytes]]]:
    port = free_port()
    proc = start_api(directory, env, port, log)
    base = f"http://127.0.0.1:{port}/v1/boards/{BOARD}"
    out: dict[str, Any] = {}
    bodies: dict[str, list[bytes]] = {}
    try:
        wait_api(proc, f"http://127.0.0.1:{port}/healthz", log)
        for kind, paths in reads.items():
            # Warm-up: maps the segments, builds the per-generation tables.
            asyncio.run(fire(base, paths[: args.warmup], args.connections, kind))
            client.config_resetstat()
            api0, redis0 = _proc_cpu(proc.pid), _proc_cpu(redis_pid)
            t0 = time.monotonic()
            got, bad = asyncio.run(fire(base, paths, args.connections, kind))
            t1 = time.monotonic()
            api1, redis1 = _proc_cpu(proc.pid), _proc_cpu(redis_pid)
            stats = commandstats(client)
            n = len(paths)
            # Commands run inside scripts count too (and their usec is also in
            # EVALSHA's): calls and usec of the top-level EVALSHAs, and calls of
            # every command.
            calls = sum(c for c, _ in stats.values()) - stats.get("info", (0, 0))[0]
            evalsha = stats.get("evalsha", (0, 0))
            out[kind] = {
                "reads": n,
                "bad": bad,
                "wall_s": round(t1 - t0, 2),
                "api_cpu_us_per_read": round((api1 - api0) / n * 1e6, 1),
                "redis_cpu_us_per_read": round((redis1 - redis0) / n * 1e6, 1),
                "evalsha_usec_per_read": round(evalsha[1] / n, 1),
                "evalsha_per_read": round(evalsha[0] / n, 2),
                "redis_calls_per_read": round(calls / n, 2),
                # Per command (those run by scripts too): calls and usec per read.
                "commands_per_read": {
                    c: [round(k / n, 2), round(u / n, 1)]
                    for c, (k, u) in sorted(stats.items())
                    if c != "info"
                },
            }
            bodies[kind] = got
            print(f"  {name} {kind}: {out[kind]}", flush=True)
            if args.py_spy is not None:
                # A separate pass (sampling stops the process: not in the CPU).
                args.py_spy.mkdir(parents=True, exist_ok=True)
                target = args.py_spy / f"{name}-{kind}.txt"
                spy = subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "--pid",
                        str(proc.pid),
                        "--rate",
                        "500",
                        "--format",
                        "raw",
                        "--output",
                        str(target),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
                asyncio.run(fire(base, paths, args.connections, kind))
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
    finally:
        stop_api(proc)
    return out, bodies


async def interleaved(
    bases: dict[str, str],
    pids: dict[str, int],
    redis_pid: int,
    reads: dict[str, list[str]],
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, dict[str, list[bytes]]]]:
    """Every variant's API up at once; per kind, the reads go in chunks of
    ``--interleave`` to each variant in turn (the order alternating per chunk),
    each chunk metered on its own (the API's and Redis' CPU around it), over
    keep-alive connections held for the whole run. On a shared machine the
    drift of minutes falls on every variant alike, which whole rounds of one
    variant after the other do not give (bench/history: ±30 % between rounds
    at load 20)."""
    import aiohttp

    names = list(bases)
    out: dict[str, Any] = {name: {} for name in names}
    bodies: dict[str, dict[str, list[bytes]]] = {name: {} for name in names}
    sessions = {
        name: aiohttp.ClientSession(
            headers=READ_HEADERS,
            connector=aiohttp.TCPConnector(limit=args.connections),
        )
        for name in names
    }

    async def fire_on(
        name: str, kind: str, paths: list[str]
    ) -> tuple[list[bytes], int]:
        got: list[bytes] = [b""] * len(paths)
        bad = 0
        queue = list(enumerate(paths))
        queue.reverse()
        session = sessions[name]

        async def lane() -> None:
            nonlocal bad
            while queue:
                k, path = queue.pop()
                async with session.get(bases[name] + path) as reply:
                    body = await reply.read()
                    if reply.status != 200 or BASIS.get(kind, LIVE) not in body:
                        bad += 1
                got[k] = body

        await asyncio.gather(*(lane() for _ in range(args.connections)))
        return got, bad

    try:
        for kind, paths in reads.items():
            for name in names:
                await fire_on(name, kind, paths[: args.warmup])
            api_s = dict.fromkeys(names, 0.0)
            redis_s = dict.fromkeys(names, 0.0)
            bad = dict.fromkeys(names, 0)
            size = args.interleave
            for j, start in enumerate(range(0, len(paths), size)):
                chunk = paths[start : start + size]
                for name in names if j % 2 == 0 else names[::-1]:
                    api0, redis0 = _proc_cpu(pids[name]), _proc_cpu(redis_pid)
                    got, wrong = await fire_on(name, kind, chunk)
                    api_s[name] += _proc_cpu(pids[name]) - api0
                    redis_s[name] += _proc_cpu(redis_pid) - redis0
                    bad[name] += wrong
                    if j == 0:
                        bodies[name][kind] = got[:COMPARED]
            for name in names:
                n = len(paths)
                out[name][kind] = {
                    "reads": n,
                    "bad": bad[name],
                    "api_cpu_us_per_read": round(api_s[name] / n * 1e6, 1),
                    "redis_cpu_us_per_read": round(redis_s[name] / n * 1e6, 1),
                }
                print(f"  {name} {kind}: {out[name][kind]}", flush=True)
    finally:
        for session in sessions.values():
            await session.close()
    return out, bodies


def comparable(body: bytes) -> Any:
    """An answer without what differs between two processes reading the same
    state (the time it was served at, if any)."""
    value = orjson.loads(body)
    if isinstance(value, dict):
        for key in ("servedAt", "requestId"):
            value.pop(key, None)
    return value


def run_interleaved(
    variants: list[tuple[str, Path]],
    env: dict[str, str],
    client: redis.Redis,
    redis_pid: int,
    reads: dict[str, list[str]],
    args: argparse.Namespace,
    data_dir: Path,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``--interleave``: each of ``--rounds`` rounds starts every variant's API,
    runs :func:`interleaved` and stops them; as (rounds, body mismatches)."""
    rounds: list[dict[str, Any]] = []
    mismatches: dict[str, int] = {}
    for k in range(args.rounds):
        print(f"round {k + 1} (interleaved): load {loadavg()}", flush=True)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        bases: dict[str, str] = {}
        try:
            for name, directory in variants:
                port = free_port()
                log = data_dir / f"api-{name}.log"
                procs[name] = start_api(directory, env, port, log)
                wait_api(procs[name], f"http://127.0.0.1:{port}/healthz", log)
                bases[name] = f"http://127.0.0.1:{port}/v1/boards/{BOARD}"
            result, bodies = asyncio.run(
                interleaved(
                    bases,
                    {name: proc.pid for name, proc in procs.items()},
                    redis_pid,
                    reads,
                    args,
                )
            )
        finally:
            for proc in procs.values():
                stop_api(proc)
        want = bodies[variants[0][0]]
        for name, _ in variants:
            for kind, got in bodies[name].items():
                differ = sum(
                    comparable(a) != comparable(b)
                    for a, b in zip(want[kind], got, strict=True)
                )
                mismatches[f"{name} {kind}"] = (
                    mismatches.get(f"{name} {kind}", 0) + differ
                )
        rounds.append({"loadavg": loadavg(), **result})
    return rounds, mismatches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--players", type=int, default=200_000)
    parser.add_argument("--extra-events", type=int, default=5_000)
    parser.add_argument("--points-step", type=int, default=10)
    parser.add_argument("--points-max", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=2_000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=DIR: a source tree whose API to measure (repeatable; default "
        "this tree as 'new')",
    )
    parser.add_argument(
        "--interleave",
        type=int,
        default=0,
        help="N: run every variant's API at once and send each kind's reads in "
        "chunks of N to each variant in turn, metered per chunk (a shared "
        "machine's drift then falls on all alike); 0: whole rounds per variant",
    )
    parser.add_argument(
        "--read-auth",
        choices=("open", "token"),
        default="open",
        help="LB_READ_AUTH of the APIs; token: every read carries a reader token",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="DIR: also sample each variant and kind with py-spy (raw folded "
        "stacks, DIR/<variant>-<kind>.txt), in a pass after the measured one",
    )
    args = parser.parse_args(argv)
    variants = [
        (v.split("=", 1)[0], Path(v.split("=", 1)[1]).resolve()) for v in args.variant
    ] or [("new", HERE)]

    from speed.server import RedisServer

    data_dir = Path(tempfile.mkdtemp(prefix="lb-live-cpu-"))
    env = stack_env(data_dir)
    server = RedisServer(data_dir / "redis", appendfsync="everysec").start()
    assert server.process is not None
    env["LB_REDIS_URL"] = server.url
    use_read_auth(env, args.read_auth)
    os.environ.update({k: v for k, v in env.items() if k.startswith("LB_")})
    client = redis.Redis.from_url(server.url)
    report: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "variants": {name: str(d) for name, d in variants},
        "loadavg_before": loadavg(),
    }
    try:
        rng = random.Random(args.seed)
        n = args.players
        steps = args.points_max // args.points_step
        points = np.array(
            [rng.randrange(steps + 1) * args.points_step for _ in range(n)],
            dtype=np.int64,
        )
        print(f"set-up: {n} players ...", flush=True)
        report["setup_bulk"] = asyncio.run(
            apply_events(server.url, [(i, int(points[i])) for i in range(n)], "bulk")
        )
        report["publish"] = publish_direct(server.url, points)
        m = min(args.extra_events, n)
        changed = rng.sample(range(n), m)
        more = [(i, (rng.randrange(steps) + 1) * args.points_step) for i in changed]
        print(f"set-up: {m} more events ...", flush=True)
        report["setup_extra"] = asyncio.run(apply_events(server.url, more, "more"))
        kinds = args.kinds.split(",")
        if "history" in kinds:
            # g2 from the live totals (as bench/reads.py's history phase): each
            # history answer then has two entries and a rankChange.
            live = points.copy()
            for i, extra in more:
                live[i] += extra
            report["publish_g2"] = publish_direct(server.url, live, 2, False)
        reads = {
            kind: [
                KINDS[kind].format(p=player_id(rng.randrange(n)))
                for _ in range(args.reads)
            ]
            for kind in kinds
        }
        rounds: list[dict[str, Any]] = []
        first: dict[str, dict[str, list[bytes]]] = {}
        mismatches: dict[str, int] = {}
        if args.interleave > 0:
            rounds, mismatches = run_interleaved(
                variants, env, client, server.process.pid, reads, args, data_dir
            )
        for k in range(0 if args.interleave > 0 else args.rounds):
            print(f"round {k + 1}: load {loadavg()}", flush=True)
            this: dict[str, Any] = {"loadavg": loadavg()}
            for name, directory in variants:
                result, bodies = measure_variant(
                    name,
                    directory,
                    env,
                    client,
                    server.process.pid,
                    reads,
                    args,
                    data_dir / f"api-{name}.log",
                )
                this[name] = result
                if not first:
                    first[name] = bodies
                for kind, got in bodies.items():
                    want = next(iter(first.values()))[kind]
                    differ = sum(
                        comparable(a) != comparable(b)
                        for a, b in zip(want, got, strict=True)
                    )
                    key = f"{name} {kind}"
                    mismatches[key] = mismatches.get(key, 0) + differ
            rounds.append(this)
        report["rounds"] = rounds
        report["body_mismatches"] = mismatches
        report["median"] = {
            name: {
                kind: {
                    field: statistics.median(r[name][kind][field] for r in rounds)
                    for field in rounds[0][name][kind]
                }
                for kind in kinds
            }
            for name, _ in variants
        }
        report["loadavg_after"] = loadavg()
    finally:
        client.close()
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    text = json.dumps(report, indent=1)
    print(json.dumps({"median": report["median"], "mismatches": mismatches}, indent=1))
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
