"""API CPU per history read over HTTP, code trees interleaved (issue 27).

    python -m bench.history_http [--data DIR] [--variant NAME=DIR ...]
                                 [--reads R] [--chunk N] [--py-spy FILE]

Over ``bench.history_reads``' data (g1 and g2 of ``season:BENCH:global`` in
``--data``; build it first with ``python -m bench.history_reads --data DIR
--players N``): a redis-server of its own (the API needs one; history reads do
not use it), then one single-worker uvicorn per variant (``bench.harness.start_api``:
``PYTHONPATH=DIR``), every read with a reader token (``LB_READ_AUTH=token``).
Kinds, each R reads over 4 keep-alive connections, sent in chunks of N to each
variant in turn (order alternating per chunk), the API process's CPU metered per
chunk: ``history`` (R distinct random players: misses of the answer cache),
``history_hit`` (the same players again: cached answers), ``diff`` g1 -> g2
(limit 20). Every answer must be 200. ``--py-spy FILE``: afterwards, R reads of
new players on the last variant sampled with py-spy (raw folded stacks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import (
    _proc_cpu,
    free_port,
    loadavg,
    stack_env,
    start_api,
    stop_api,
    wait_api,
)
from bench.reads import READ_HEADERS, use_read_auth

BOARD = "season:BENCH:global"
KINDS = ("history", "history_hit", "diff")
HERE = Path(__file__).resolve().parent.parent


def history_path(i: int) -> str:
    return f"/players/p{i:07d}/history"


async def measure(
    bases: dict[str, str],
    pids: dict[str, int],
    paths: dict[str, list[str]],
    warm: list[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    import aiohttp

    sessions = {
        name: aiohttp.ClientSession(
            headers=READ_HEADERS, connector=aiohttp.TCPConnector(limit=4)
        )
        for name in bases
    }

    async def fire(name: str, todo: list[str], check: bool = True) -> None:
        queue = list(reversed(todo))

        async def lane() -> None:
            while queue:
                path = queue.pop()
                async with sessions[name].get(bases[name] + path) as reply:
                    body = await reply.read()
                    if check and reply.status != 200:
                        raise RuntimeError(f"{name} {path}: {reply.status} {body!r}")

        await asyncio.gather(*(lane() for _ in range(4)))

    out: dict[str, Any] = {}
    try:
        for name in bases:
            # Warm-up: the first reads map the generations and build the pair's
            # arrays (the registry may not have noticed them on the very first).
            await fire(name, warm, check=False)
            await fire(name, paths["diff"][:50])
        for kind in KINDS:
            todo = paths[kind]
            cpu = dict.fromkeys(bases, 0.0)
            for j, start in enumerate(range(0, len(todo), args.chunk)):
                for name in list(bases) if j % 2 == 0 else list(bases)[::-1]:
                    before = _proc_cpu(pids[name])
                    await fire(name, todo[start : start + args.chunk])
                    cpu[name] += _proc_cpu(pids[name]) - before
            out[kind] = {name: round(cpu[name] / len(todo) * 1e6, 1) for name in bases}
            print(kind, "API CPU us per read", out[kind], loadavg(), flush=True)
        if args.py_spy:
            name = list(bases)[-1]
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(pids[name]),
                    "--rate",
                    "500",
                    "--format",
                    "raw",
                    "--output",
                    args.py_spy,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)
            await fire(name, paths["spy"])
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
    finally:
        for session in sessions.values():
            await session.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/tmp/lb-history-bench")
    p.add_argument("--variant", action="append", default=[], help="NAME=DIR")
    p.add_argument("--reads", type=int, default=3000)
    p.add_argument("--chunk", type=int, default=250)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--py-spy", default="")
    args = p.parse_args(argv)
    variants = [
        (v.split("=", 1)[0], Path(v.split("=", 1)[1]).resolve()) for v in args.variant
    ] or [("new", HERE)]
    source = Path(args.data)
    players = json.loads((source / "params.json").read_text())["players"]
    rng = random.Random(args.seed)
    picked = rng.sample(range(players), args.reads)
    paths = {
        "history": [history_path(i) for i in picked],
        "history_hit": [history_path(i) for i in picked],
        "diff": ["/diff?from=g1&to=g2&limit=20"] * args.reads,
    }
    warm = [history_path(i) for i in rng.sample(range(players), 100)]
    if args.py_spy:
        paths_spy = [history_path(i) for i in rng.sample(range(players), args.reads)]

    from speed.server import RedisServer

    data = Path(tempfile.mkdtemp(prefix="lb-history-http-"))
    env = stack_env(data)
    (data / "segments").symlink_to(source.resolve() / "segments")
    if (source / "delta").exists():
        # The bronze table (code that read contributions from it: before the
        # contributions index).
        (data / "delta").symlink_to(source.resolve() / "delta")
    server = RedisServer(data / "redis", appendfsync="everysec").start()
    env["LB_REDIS_URL"] = server.url
    use_read_auth(env, "token")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    bases: dict[str, str] = {}
    report: dict[str, Any] = {"loadavg_before": loadavg()}
    try:
        for name, tree in variants:
            port = free_port()
            log = data / f"api-{name}.log"
            procs[name] = start_api(tree, env, port, log)
            wait_api(procs[name], f"http://127.0.0.1:{port}/healthz", log)
            bases[name] = f"http://127.0.0.1:{port}/v1/boards/{BOARD}"
        measured = dict(paths)
        if args.py_spy:
            measured["spy"] = paths_spy
        report["api_cpu_us_per_read"] = asyncio.run(
            measure(bases, {n: q.pid for n, q in procs.items()}, measured, warm, args)
        )
        report["loadavg_after"] = loadavg()
    finally:
        for proc in procs.values():
            stop_api(proc)
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
