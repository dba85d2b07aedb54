"""The API's CPU per read, open against LB_READ_AUTH=token (issue 26), per read kind,
and for two code trees side by side (old main against a branch).

    python -m bench.read_gate [--players N] [--seconds S] [--rounds R]
                              [--connections C] [--old PATH] [--kinds a,b]

Set-up (not measured): one `lb up` stack (its Redis, its data dir), N players applied
straight through ``SpeedLayer.apply`` and a generation published directly
(``bench.reads.publish_direct``), then 1,000 more events after it, as
``bench.reads --publish direct`` does. Beside that stack's own API, one
single-worker uvicorn per (code tree, LB_READ_AUTH) on the same Redis and data
dir: this tree's and ``--old``'s, ``open`` and ``token``.

Measured: per round, per read kind, each API in turn (the order rotates per round)
gets S seconds of a closed loop of C keep-alive connections (a lean asyncio HTTP
client; with ``token`` every read carries the same reader token, as a game's front
end would send); the API's CPU is its worker's utime + stime from /proc, so the
figure is CPU per answered read, not latency, and holds on a busy machine. Every
answer must be a 200. The median over rounds is reported per (API, kind).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import (
    BENCH_SEASON,
    _proc_cpu,
    free_port,
    loadavg,
    stack_env,
    start_api,
    start_stack,
    stop_api,
    stop_stack,
    wait_api,
)
from bench.reads import apply_events, player_id, publish_direct

BOARD = f"season:{BENCH_SEASON}:global"
REPO = Path(__file__).resolve().parent.parent


def kinds(players: int, rng: random.Random) -> dict[str, Any]:
    """Read kind -> a function of k giving the path of request k."""
    api = f"/v1/boards/{BOARD}"

    def player(_: int) -> str:
        return player_id(rng.randrange(players))

    return {
        "snapshot_top100": lambda k: f"{api}/top?limit=100&mode=snapshot",
        "snapshot_rank": lambda k: f"{api}/players/{player(k)}?mode=snapshot",
        "live_top100": lambda k: f"{api}/top?limit=100",
        "live_top100_dense": lambda k: f"{api}/top?limit=100&ranking=dense",
        "live_rank": lambda k: f"{api}/players/{player(k)}",
        "approx_rank": lambda k: f"{api}/players/{player(k)}?mode=approx",
    }


class Lean:
    """A keep-alive HTTP/1.1 GET client on asyncio streams (Content-Length
    answers), cheap enough to share the cores with the service."""

    def __init__(self, port: int, header_lines: str) -> None:
        self.port = port
        self.header_lines = header_lines
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> tuple[int, bytes]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", self.port
            )
        head = f"GET {path} HTTP/1.1\r\nHost: x\r\n{self.header_lines}\r\n"
        self.writer.write(head.encode("latin-1"))
        reply = await self.reader.readuntil(b"\r\n\r\n")
        status = int(reply[9:12])
        at = reply.lower().find(b"\r\ncontent-length:")
        length = int(reply[at + 17 : reply.index(b"\r\n", at + 2)])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def closed_loop(
    port: int, header_lines: str, path_of: Any, connections: int, seconds: float
) -> tuple[int, dict[int, int]]:
    deadline = time.perf_counter() + seconds
    statuses: dict[int, int] = {}
    counter = [0]

    async def worker() -> None:
        client = Lean(port, header_lines)
        try:
            while time.perf_counter() < deadline:
                counter[0] += 1
                status, _ = await client.get(path_of(counter[0]))
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            client.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return statuses.get(200, 0), statuses


class Api:
    """One single-worker uvicorn of a code tree on the stack's Redis and data."""

    def __init__(
        self,
        name: str,
        tree: Path,
        auth: str,
        env: dict[str, str],
        root: Path,
        limit: str = "off",
    ) -> None:
        self.name = name
        self.port = free_port()
        metrics = root / f"metrics-{name}"
        metrics.mkdir()
        self.log = root / f"{name}.log"
        self.proc = start_api(
            tree,
            {
                **env,
                "LB_READ_AUTH": auth,
                "LB_READ_RATE_LIMIT": limit,
                "PROMETHEUS_MULTIPROC_DIR": str(metrics),
            },
            self.port,
            self.log,
        )
        self.auth = auth

    def wait_ready(self, headers: dict[str, str], timeout: float = 60) -> None:
        url = f"http://127.0.0.1:{self.port}/v1/boards/{BOARD}/top?limit=1"
        wait_api(self.proc, url, self.log, headers, timeout)

    def stop(self) -> None:
        stop_api(self.proc)


async def asgi_get(app: Any, path: str, headers: list[tuple[bytes, bytes]]) -> int:
    """One GET straight through the ASGI app (no HTTP server): its status."""
    route, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": route,
        "raw_path": route.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"x"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    status = [0]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status[0] = message["status"]

    await app(scope, receive, send)
    return status[0]


async def in_process(
    paths: dict[str, Any],
    chosen: list[str],
    token: str,
    blocks: int,
    per_block: int,
    profile_dir: Path | None,
) -> dict[str, Any]:
    """This tree's app three times in this process (LB_READ_AUTH open, token, and
    token with LB_READ_RATE_LIMIT high enough never to refuse), each
    read kind alternated in blocks of ``per_block`` sequential reads; CPU per read
    from ``time.process_time`` (the app's and its Redis client's, this process)."""
    import cProfile
    import pstats

    from api.main import create_app
    from conf.settings import load_settings

    apps: dict[str, Any] = {}
    contexts = []
    for auth in ("open", "token", "limit"):
        os.environ["LB_READ_AUTH"] = "open" if auth == "open" else "token"
        # A limit high enough never to refuse: each read spends a token.
        os.environ["LB_READ_RATE_LIMIT"] = (
            "1000000/0.000001" if auth == "limit" else "off"
        )
        app = create_app(load_settings())
        ctx = app.router.lifespan_context(app)
        await ctx.__aenter__()
        contexts.append(ctx)
        apps[auth] = app
    bearer = [(b"authorization", f"Bearer {token}".encode())]
    headers: dict[str, list[tuple[bytes, bytes]]] = {
        "open": [],
        "token": bearer,
        "limit": bearer,
    }
    out: dict[str, Any] = {}
    try:
        for kind in chosen:
            per: dict[str, list[float]] = {auth: [] for auth in apps}
            for auth in apps:
                for k in range(50):
                    assert (
                        await asgi_get(apps[auth], paths[kind](k), headers[auth]) == 200
                    )
            for b in range(blocks):
                names = list(apps)
                for auth in names[b % 3 :] + names[: b % 3]:
                    app, head = apps[auth], headers[auth]
                    t0 = time.process_time()
                    for k in range(per_block):
                        status = await asgi_get(app, paths[kind](k), head)
                        if status != 200:
                            raise RuntimeError(f"{kind} {auth}: {status}")
                    per[auth].append((time.process_time() - t0) / per_block * 1e6)
            out[kind] = {
                auth: round(statistics.median(v), 1) for auth, v in per.items()
            }
            print(f"in-process {kind:18} {out[kind]}", flush=True)
            if profile_dir is not None:
                for auth in apps:
                    prof = cProfile.Profile()
                    prof.enable()
                    for k in range(per_block):
                        await asgi_get(apps[auth], paths[kind](k), headers[auth])
                    prof.disable()
                    target = profile_dir / f"read-gate-{kind}-{auth}.txt"
                    with target.open("w") as f:
                        stats = pstats.Stats(prof, stream=f)
                        stats.sort_stats("tottime").print_stats(40)
                        stats.sort_stats("cumtime").print_stats(60)
    finally:
        for ctx in contexts:
            await ctx.__aexit__(None, None, None)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from api.tokens import issue_reader_token
    from conf.settings import LOCAL_PLAYER_TOKEN_KEY

    root = Path(tempfile.mkdtemp(prefix="lb-read-gate-"))
    data_dir = root / "data"
    env = stack_env(data_dir)
    env["LB_PLAYER_TOKEN_KEY"] = LOCAL_PLAYER_TOKEN_KEY
    env.pop("LB_READ_RATE_LIMIT", None)
    report: dict[str, Any] = {
        "players": args.players,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "connections": args.connections,
        "load_start": loadavg(),
        "trees": {"new": str(REPO), "old": str(args.old) if args.old else None},
    }
    try:
        for tree in (REPO, args.old):
            if tree is not None:
                report[f"commit_{tree.name}"] = subprocess.run(
                    ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
    except OSError:
        pass
    url, redis_url, _ = start_stack(env, data_dir, free_port())
    apis: list[Api] = []
    try:
        os.environ.update({k: v for k, v in env.items() if k.startswith("LB_")})
        os.environ["LB_REDIS_URL"] = redis_url
        env["LB_REDIS_URL"] = redis_url
        rng = random.Random(11)
        n = args.players
        points = np.array([rng.randrange(101) * 10 for _ in range(n)], dtype=np.int64)
        print(f"set-up: {n} players ...", flush=True)
        asyncio.run(
            apply_events(redis_url, [(i, int(points[i])) for i in range(n)], "b")
        )
        print("set-up: direct publish + rebase ...", flush=True)
        publish_direct(redis_url, points)
        more = rng.sample(range(n), min(1000, n))
        asyncio.run(apply_events(redis_url, [(i, 10) for i in more], "m"))

        token = issue_reader_token(LOCAL_PLAYER_TOKEN_KEY.encode(), "bench", 86_400)
        token_headers = {"Authorization": f"Bearer {token}"}
        trees = [("new", REPO)] + ([("old", args.old)] if args.old else [])
        paths = kinds(n, random.Random(7))
        chosen = args.kinds.split(",") if args.kinds else list(paths)
        if args.in_process:
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                report["in_process_us_cpu_per_read"] = runner.run(
                    in_process(
                        paths,
                        chosen,
                        token,
                        args.rounds * 2,
                        args.per_block,
                        args.profile_dir,
                    )
                )
            trees = []
        for tree_name, tree in trees:
            for auth in ("open", "token"):
                apis.append(Api(f"{tree_name}-{auth}", tree, auth, env, root))
            if args.limit:
                # A limit high enough never to refuse: each read spends a token.
                apis.append(
                    Api(
                        f"{tree_name}-limit",
                        tree,
                        "token",
                        env,
                        root,
                        "1000000/0.000001",
                    )
                )
        for api in apis:
            api.wait_ready(token_headers if api.auth == "token" else {})
        print(f"APIs: {[(a.name, a.proc.pid) for a in apis]}", flush=True)
        lines = {"open": "", "token": f"Authorization: Bearer {token}\r\n"}
        samples: dict[str, dict[str, list[float]]] = {
            api.name: {kind: [] for kind in chosen} for api in apis
        }
        errors: dict[str, dict[str, Any]] = {}
        # Warm every API on every kind (segments mapped, scripts loaded, pools).
        for api in apis:
            for kind in chosen:
                asyncio.run(closed_loop(api.port, lines[api.auth], paths[kind], 4, 0.5))
        for r in range(args.rounds if apis else 0):
            order = apis[r % len(apis) :] + apis[: r % len(apis)]
            for kind in chosen:
                for api in order:
                    pid = api.proc.pid
                    before = _proc_cpu(pid)
                    ok, statuses = asyncio.run(
                        closed_loop(
                            api.port,
                            lines[api.auth],
                            paths[kind],
                            args.connections,
                            args.seconds,
                        )
                    )
                    cpu = _proc_cpu(pid) - before
                    if set(statuses) != {200}:
                        errors.setdefault(api.name, {})[kind] = statuses
                    if ok:
                        samples[api.name][kind].append(cpu / ok * 1e6)
                    print(
                        f"round {r} {kind:18} {api.name:10} {ok:6} reads "
                        f"{cpu / max(ok, 1) * 1e6:8.1f} us CPU/read  load "
                        f"{loadavg()[0]:.2f}",
                        flush=True,
                    )
        report["us_cpu_per_read_median"] = {
            name: {
                kind: round(statistics.median(v), 1) if v else None
                for kind, v in by_kind.items()
            }
            for name, by_kind in samples.items()
        }
        report["us_cpu_per_read_samples"] = samples
        report["errors"] = errors
        report["load_end"] = loadavg()
    finally:
        for api in apis:
            api.stop()
        stop_stack(env)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.read_gate", description=__doc__)
    p.add_argument("--players", type=int, default=50_000)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--old", type=Path, default=None, help="another code tree")
    p.add_argument("--kinds", default="", help="comma-separated read kinds")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="drive this tree's app through ASGI in this process instead "
        "(no HTTP servers), open and token alternated in blocks",
    )
    p.add_argument("--per-block", type=int, default=500)
    p.add_argument(
        "--limit",
        action="store_true",
        help="also an API with LB_READ_RATE_LIMIT high enough never to refuse",
    )
    p.add_argument("--profile-dir", type=Path, default=None, help="cProfile dumps")
    args = p.parse_args(argv)
    report = run(args)
    print(json.dumps(report, indent=1, default=str)[:200000])
    table = report.get("us_cpu_per_read_median")
    if not table:
        return 0
    print("\nus of API CPU per read (median of rounds):")
    names = list(table)
    print(f"{'kind':20}" + "".join(f"{n:>12}" for n in names))
    for kind in next(iter(table.values())):
        print(f"{kind:20}" + "".join(f"{table[n][kind]!s:>12}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
