"""What the benchmarks share: the stack, signing, load generation, measurement.

* the stack: ``lb up`` / ``lb down`` in a fresh LB_DATA_DIR with the bench boards
  (one season, ``BENCH``, open around now), the way a user starts it; beside it,
  single-worker APIs of any code tree (old main against a branch);
* signing: the dev key's HMAC headers (``api.security.sign``);
* load generation: unique events for a pool of players, batches validated as the
  API would, a keep-alive HTTP client, the speed layer driven directly, and the
  check of each score-event reply;
* measurement: percentiles, CPU seconds per process (tree) and for the machine,
  the generator's own GC pauses, the load average, the machine's facts.

``bench.ingest`` and ``bench.reads`` are the benchmarks that use most of it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml

from api.security import sign
from cli.supervisor import HTTP_PROTOCOL, api_command

KEY_ID = "dev"
SECRET = b"dev-secret"
REGIONS = ("eu", "na")
BOARDS_PER_EVENT = 10  # the season, daily, weekly, monthly, all-time; global + region
BENCH_SEASON = "BENCH"
# Events occur in the last RECENT_SPAN before the run, so every board they name is
# open: a daily board closes an hour after its day, and the oldest event is 50
# minutes old. (Spreading them over a fixed month made 39 % of board references
# late by 30 November, and every one of them after the month's season closed.)
RECENT_SPAN = timedelta(minutes=50)


# --------------------------------------------------------------------------- stack


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lb_command() -> list[str]:
    """The `lb` console script next to this interpreter, else the module."""
    script = Path(sys.executable).parent / "lb"
    if script.exists():
        return [str(script)]
    found = shutil.which("lb")
    return [found] if found else [sys.executable, "-m", "cli.main"]


def bench_games(games: int) -> list[str]:
    """The game ids of a bench run with ``games`` games (0: a file without
    ``games:``, whose one game ``default`` has the unprefixed paths)."""
    return [f"game{i + 1}" for i in range(games)]


def score_path(game: str | None, batch: bool) -> str:
    """The write path of ``game`` (None: the unprefixed default game's)."""
    tail = "score-events:batch" if batch else "score-events"
    return f"/v1/{tail}" if game is None else f"/v1/games/{game}/{tail}"


def bench_boards_config(now: datetime, games: int = 0) -> dict[str, Any]:
    """The packaged default boards with one season, ``BENCH``, open around ``now``;
    with ``games`` >= 1 a ``games:`` file of that many identical games.

    The default file's season has fixed dates; a benchmark that used it would
    measure fewer boards per event (and then none accepted) as the calendar moves.
    Everything else (regions, tiers, lateness) is the default a user gets.
    """
    from importlib import resources

    config = yaml.safe_load(resources.files("conf").joinpath("boards.yaml").read_text())
    season = dict(config["seasons"][0])
    season.update(
        id=BENCH_SEASON,
        start=(now - timedelta(days=14)).strftime("%Y-%m-%dT00:00:00Z"),
        end=(now + timedelta(days=14)).strftime("%Y-%m-%dT00:00:00Z"),
    )
    config["seasons"] = [season]
    if games:
        return {"games": [{"id": g, **config} for g in bench_games(games)]}
    return dict(config)


def bench_boards(now: datetime | None = None) -> Any:
    """:func:`bench_boards_config` validated, for benchmarks that run in process."""
    from conf.boards import BoardsConfig

    return BoardsConfig.model_validate(bench_boards_config(now or datetime.now(UTC)))


def bench_boards_file(directory: Path, now: datetime, games: int = 0) -> Path:
    """:func:`bench_boards_config` as a boards file, for `lb up`'s LB_BOARDS_FILE."""
    path = directory / "bench-boards.yaml"
    path.write_text(yaml.safe_dump(bench_boards_config(now, games), sort_keys=False))
    return path


def stack_env(data_dir: Path, games: int = 0) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("LB_REDIS_URL", "LB_APPENDFSYNC", "LB_PARTITIONS"):
        env.pop(name, None)  # the defaults a user gets: local Redis, fsync always
    data_dir.mkdir(parents=True, exist_ok=True)
    env["LB_BOARDS_FILE"] = str(bench_boards_file(data_dir, datetime.now(UTC), games))
    env["LB_DATA_DIR"] = str(data_dir)
    env["LB_RATE_LIMIT"] = "off"
    env["LB_HMAC_KEYS"] = f"{KEY_ID}:{SECRET.decode()}"
    return env


def lb(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    proc = subprocess.run(
        lb_command() + args, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"lb {' '.join(args)} failed ({proc.returncode}): "
            f"{proc.stdout}{proc.stderr}"
        )
    return proc.stdout.strip()


def start_stack(
    env: dict[str, str], data_dir: Path, port: int
) -> tuple[str, str, dict[str, int]]:
    """``lb up --port <port>`` (its output printed); returns the API's URL, Redis'
    URL and the pids to meter: the API (uvicorn's supervisor), Redis and this
    generator."""
    print(lb(["up", "--port", str(port)], env), flush=True)
    url = f"http://127.0.0.1:{port}"
    run_dir = data_dir / "run"
    redis_url = (run_dir / "redis.url").read_text().strip()
    pids = {
        "api": int((run_dir / "api.pid").read_text()),
        "redis": int((run_dir / "redis.pid").read_text()),
        "generator": os.getpid(),
    }
    return url, redis_url, pids


def stop_stack(env: dict[str, str]) -> bool:
    """``lb down`` (its output printed); False when it failed (reported, not
    raised, so the caller still cleans up)."""
    try:
        print(lb(["down"], env), flush=True)
    except Exception as exc:  # noqa: BLE001 - report, still clean up
        print(f"lb down failed: {exc}", file=sys.stderr)
        return False
    return True


def start_api(
    tree: Path, env: dict[str, str], port: int, log: Path
) -> subprocess.Popen[bytes]:
    """One single-worker uvicorn of ``tree``'s API (``api.main:create_app`` with
    ``tree`` on PYTHONPATH and as working directory, uvicorn's protocol as ``lb up``
    gives it) on 127.0.0.1:``port``, in a
    session of its own, its output appended to ``log``: the API a bench compares
    across code trees (``lb up`` runs this tree's only). Not waited for
    (:func:`wait_api`), stopped by :func:`stop_api`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            api_command("127.0.0.1", port, *HTTP_PROTOCOL),
            cwd=tree,
            env={**env, "PYTHONPATH": str(tree)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_api(
    proc: subprocess.Popen[bytes],
    url: str,
    log: Path,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> None:
    """Until a GET of ``url`` (with ``headers``) answers 2xx; RuntimeError with the
    end of ``log`` when the API exits or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the API exited: {log.read_text()[-2000:]}")
        try:
            request = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(request, timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the API did not answer {url}: {log.read_text()[-2000:]}")


def stop_api(proc: subprocess.Popen[bytes], grace: float = 20) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- events


class EventFactory:
    """Unique events (new eventId and matchId each) for a pool of players."""

    def __init__(self, players: int, seed: int, now: datetime) -> None:
        self.players = players
        self.rng = random.Random(seed)
        self.counter = 0
        # occurredAt in the RECENT_SPAN before now: every board it names is open.
        self.oldest = now - RECENT_SPAN
        self.span = int(RECENT_SPAN.total_seconds()) - 60

    def event(self, tag: str) -> dict[str, Any]:
        self.counter += 1
        n = self.counter
        moment = self.oldest + timedelta(seconds=self.rng.randrange(self.span))
        return {
            "eventId": f"{tag}-e{n}",
            "playerId": f"P{self.rng.randrange(self.players)}",
            "matchId": f"{tag}-m{n}",
            "sourceRevision": 1,
            "occurredAt": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGIONS[n % len(REGIONS)],
            "result": {"points": self.rng.randrange(0, 1000)},
            "kind": "result",
            "reason": None,
        }


def prepared_batches(
    factory: EventFactory, events: int, batch_size: int, tag: str
) -> list[tuple[list[dict[str, Any]], list[Any]]]:
    """``events`` new events in batches of ``batch_size``: each batch's raw bodies
    and the same events validated as the API would (for the speed layer alone)."""
    from conf.rules import default_registry
    from conf.settings import Settings
    from speed.events import validate_event

    settings = Settings(rate_limit="off")
    boards = bench_boards()
    rules = default_registry()
    now = datetime.now(UTC)
    batches = []
    for b in range((events + batch_size - 1) // batch_size):
        raws = [
            factory.event(f"{tag}{b}")
            for _ in range(min(batch_size, events - b * batch_size))
        ]
        valid = [validate_event(r, settings, boards, now, rules) for r in raws]
        batches.append((raws, valid))
    return batches


def signed(body: bytes) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "x-key-id": KEY_ID,
        "x-signature": sign(SECRET, body),
    }


# --------------------------------------------------------------------------- client


class Client:
    """A keep-alive HTTP client with at most ``connections`` connections: aiohttp when
    installed and preferred (much less CPU per small request, which matters since the
    generator shares the machine), else httpx (measured faster for 1000-event
    batches)."""

    def __init__(
        self, base: str, connections: int, timeout: float, prefer: str
    ) -> None:
        self.base = base
        try:
            import aiohttp
        except ImportError:
            aiohttp = None  # type: ignore[assignment]
        if prefer == "httpx":
            aiohttp = None  # type: ignore[assignment]
        self.kind = "aiohttp" if aiohttp is not None else "httpx"
        if aiohttp is not None:
            self._session: Any = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=connections, force_close=False),
                timeout=aiohttp.ClientTimeout(total=timeout),
            )
            self._errors: tuple[type[BaseException], ...] = (
                aiohttp.ClientError,
                asyncio.TimeoutError,
            )
        else:
            limits = httpx.Limits(
                max_connections=connections, max_keepalive_connections=connections
            )
            self._session = httpx.AsyncClient(limits=limits, timeout=timeout)
            self._errors = (httpx.HTTPError,)

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        return self._errors

    async def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        if self.kind == "aiohttp":
            async with self._session.post(
                self.base + path, data=body, headers=headers
            ) as reply:
                return reply.status, await reply.read()
        reply = await self._session.post(
            self.base + path, content=body, headers=headers
        )
        return reply.status_code, reply.content

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.kind == "aiohttp":
            await self._session.close()
        else:
            await self._session.aclose()


# --------------------------------------------------------------------------- stats


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def summarize_ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 50) * 1000, 2),
        "p99_ms": round(percentile(values, 99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2) if values else float("nan"),
        "mean_ms": round(sum(values) / len(values) * 1000, 2)
        if values
        else float("nan"),
    }


@dataclass
class Verify:
    """Checks each accepted result against the event sent. ``require_position`` is
    off only for the naive yardstick (bench/naive_mvp.py), which has no log."""

    accepted: int = 0
    other_status: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)
    require_position: bool = True

    def check(self, sent: dict[str, Any], result: dict[str, Any]) -> None:
        if "error" in result:
            self.errors[result["error"]] = self.errors.get(result["error"], 0) + 1
            return
        status = result.get("status")
        if status != "accepted":
            self.other_status[str(status)] = self.other_status.get(str(status), 0) + 1
            return
        problems = []
        if result.get("eventId") != sent["eventId"]:
            problems.append("eventId")
        if result.get("playerId") != sent["playerId"]:
            problems.append("playerId")
        boards = result.get("boards") or []
        if len(boards) != BOARDS_PER_EVENT:
            problems.append(f"{len(boards)} boards")
        # A board past its cutoff is named with its own status and not applied.
        not_applied = [b["board"] for b in boards if b.get("status", status) != status]
        if not_applied:
            problems.append(f"not applied on {', '.join(not_applied)}")
        day = sent["occurredAt"][:10]
        names = {b["board"] for b in boards}
        for expected in (
            f"season:{BENCH_SEASON}:global",
            f"season:{BENCH_SEASON}:{sent['region']}",
            f"daily:{day}:global",
            "alltime:all:global",
        ):
            if expected not in names:
                problems.append(f"missing {expected}")
        position = result.get("position")
        if self.require_position and (not isinstance(position, int) or position < 1):
            problems.append("position")
        if problems:
            if len(self.bad) < 10:
                self.bad.append(f"{sent['eventId']}: {', '.join(problems)}")
            return
        self.accepted += 1


# --------------------------------------------------------------------- speed layer


async def bench_speed_layer(
    redis_url: str,
    factory: EventFactory,
    total_events: int,
    batch_size: int,
    concurrency: int,
) -> dict[str, Any]:
    """The speed layer alone (no HTTP, no validation on the clock): SpeedLayer.apply on
    pre-normalized batches against the stack's Redis. An upper bound for what the HTTP
    path can reach with this Lua on this Redis."""
    import redis.asyncio as aioredis

    from conf.rules import default_registry
    from conf.settings import Settings
    from speed.events import validate_event
    from speed.store import SpeedLayer

    settings = Settings(rate_limit="off")
    boards = bench_boards()
    rules = default_registry()
    now = datetime.now(UTC)
    batches = prepared_batches(factory, total_events, batch_size, "d")
    client = aioredis.from_url(redis_url, max_connections=256)
    speed = SpeedLayer(
        client, boards, settings.partitions, settings.record_ttl_seconds, None
    )
    verify = Verify()
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(batches)):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            raws, events = batches[queue.get_nowait()]
            started = time.perf_counter()
            outcomes = await speed.apply(events)
            latencies.append(time.perf_counter() - started)
            for raw, outcome in zip(raws, outcomes, strict=True):
                verify.check(
                    raw, outcome.body or {"error": type(outcome.error).__name__}
                )

    try:
        # Load the script outside the clock, with an event of its own.
        warm = factory.event("dwarm")
        await speed.apply([validate_event(warm, settings, boards, now, rules)])
        started = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        elapsed = time.perf_counter() - started
    finally:
        await client.aclose()
    return {
        "events": total_events,
        "batch_size": batch_size,
        "concurrency": concurrency,
        "elapsed_s": round(elapsed, 3),
        "accepted": verify.accepted,
        "accepted_per_s": round(verify.accepted / elapsed, 1),
        "other_status": verify.other_status,
        "event_errors": verify.errors,
        "verification_failures": verify.bad,
        "latency_per_batch": summarize_ms(latencies),
    }


# --------------------------------------------------------------------------- cpu


CLK_TCK = os.sysconf("SC_CLK_TCK")
# The API's pid is uvicorn's supervisor; its workers (children) serve the requests.
API_TREE = ("api",)


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _proc_cpu(pid: int) -> float:
    """CPU seconds of ``pid``: utime + stime, all threads."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and every process below it (uvicorn's workers are
    children of the API's pid): utime + stime of each, plus cutime + cstime
    (children it reaped, so a worker that exits mid-phase keeps its CPU in the
    sum)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields is not None:
                parent[int(entry.name)] = int(fields[1])
    tree = {pid}
    while True:
        below = {child for child, ppid in parent.items() if ppid in tree}
        if below <= tree:
            break
        tree |= below
    total = 0
    for member in tree:
        fields = _stat_fields(member)
        if fields is not None:
            total += sum(int(x) for x in fields[11:15])
    return total / CLK_TCK


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    parts = [
        int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ]
    idle = parts[3] + parts[4]
    return (sum(parts[:8]) - idle) / CLK_TCK, sum(parts[:8]) / CLK_TCK


class CpuMeter:
    """CPU seconds used by the API, Redis, this generator and everything else.

    Names in ``trees`` count their process and every descendant: the API's pid is
    uvicorn's supervisor, which does no request work; its worker processes do.
    """

    def __init__(self, pids: dict[str, int], trees: Iterable[str] = ()) -> None:
        self.pids = pids
        self.trees = frozenset(trees)
        self.end: dict[str, float] | None = None
        self.start = self._snap()

    def _snap(self) -> dict[str, float]:
        snap = {
            name: (_tree_cpu if name in self.trees else _proc_cpu)(pid)
            for name, pid in self.pids.items()
        }
        snap["machine_busy"], snap["machine_total"] = _machine_cpu()
        snap["wall"] = time.monotonic()
        return snap

    def restart(self) -> None:
        """Start the measured interval again from now (set-up after the meter was
        made, like encoding a phase's requests, is then not counted)."""
        self.start = self._snap()

    def halt(self) -> None:
        """The end of the measured interval, when it comes before stop() (work
        after it, like checking replies, is then not counted)."""
        self.end = self._snap()

    def stop(self, events: int) -> dict[str, Any]:
        end = self.end or self._snap()
        d = {k: end[k] - self.start[k] for k in end}
        ours = sum(d[name] for name in self.pids)
        out: dict[str, Any] = {f"{name}_cpu_s": round(d[name], 2) for name in self.pids}
        out["other_processes_cpu_s"] = round(max(0.0, d["machine_busy"] - ours), 2)
        out["machine_idle_cpu_s"] = round(d["machine_total"] - d["machine_busy"], 2)
        out["wall_s"] = round(d["wall"], 2)
        if events:
            out.update(
                {
                    f"{name}_cpu_us_per_event": round(d[name] / events * 1e6, 1)
                    for name in self.pids
                }
            )
        return out


def top_processes(n: int = 6) -> list[str]:
    proc = subprocess.run(
        ["ps", "-eo", "pid,pcpu,etime,comm", "--sort=-pcpu"],
        capture_output=True,
        text=True,
    )
    return [" ".join(line.split()) for line in proc.stdout.splitlines()[1 : n + 1]]


# --------------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True
        ).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    redis_version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "redis": redis_version,
        "platform": platform.platform(),
    }


class GcPauses:
    """The load generator's own garbage-collector pauses during a phase. Latency
    is measured from each request's scheduled send, so a pause of the generator's
    event loop shows as latency of every request in flight: a full collection of a
    large heap (tens of ms) alone can make a phase's p99."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float, float]] = []  # generation, start, end
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = time.monotonic()  # = the loop's clock (asyncio and uvloop)
        if phase == "start":
            self._start = now
        else:
            self.pauses.append((info["generation"], self._start, now))

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._callback)

    def report(
        self, sent: list[float], latencies: list[float], over_ms: float
    ) -> dict[str, Any]:
        """Collections per generation, the longest, their total, and how many of
        the requests slower than ``over_ms`` were in flight during a pause of at
        least 5 ms (the generator's share of the tail)."""
        long = [(a, b) for _, a, b in self.pauses if (b - a) * 1000 >= 5]
        slow_in_pause = sum(
            1
            for start, latency in zip(sent, latencies, strict=True)
            if latency * 1000 > over_ms
            and any(a < start + latency and b > start for a, b in long)
        )
        return {
            "collections": dict(Counter(str(g) for g, _, _ in self.pauses)),
            "max_ms": round(
                max(((b - a) * 1000 for _, a, b in self.pauses), default=0), 1
            ),
            "total_ms": round(sum((b - a) * 1000 for _, a, b in self.pauses), 1),
            f"slow_over_{over_ms:g}ms": sum(1 for v in latencies if v * 1000 > over_ms),
            "of_them_in_flight_during_a_pause_over_5ms": slow_in_pause,
        }


def redis_forks(client: Any) -> dict[str, Any]:
    """Forks and AOF rewrites (counted since the last CONFIG RESETSTAT): a rewrite
    forks the whole dataset and its child takes a core, which on this 2-core
    machine shows as a latency tail of whatever runs meanwhile (the single POSTs
    after `make bench`'s batch phase has grown the AOF; reads)."""
    info = client.info("persistence") | client.info("stats")
    return {
        k: info.get(k)
        for k in (
            "total_forks",
            "latest_fork_usec",
            "aof_rewrites",
            "aof_rewrite_in_progress",
            "aof_last_rewrite_time_sec",
            "aof_last_bgrewrite_status",
            "rdb_bgsave_in_progress",
        )
    }


def redis_command_usec(client: Any) -> dict[str, tuple[int, int]]:
    """Per command (those a script calls included): (calls, usec) since the last
    CONFIG RESETSTAT, from ``INFO commandstats``; two readings' difference
    (:func:`redis_command_delta`) says which commands a phase's Redis time went to."""
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in client.info("commandstats").items()
    }


def redis_command_delta(
    before: dict[str, tuple[int, int]],
    after: dict[str, tuple[int, int]],
    requests: int,
    top: int = 8,
) -> list[dict[str, Any]]:
    """The ``top`` commands by Redis time between two :func:`redis_command_usec`
    readings, with calls and microseconds per request (``requests`` answered)."""
    rows = []
    for name, (calls, usec) in after.items():
        calls0, usec0 = before.get(name, (0, 0))
        if usec > usec0:
            rows.append((usec - usec0, calls - calls0, name))
    rows.sort(reverse=True)
    per = max(1, requests)
    return [
        {
            "command": name,
            "calls_per_request": round(calls / per, 2),
            "usec_per_request": round(usec / per, 1),
        }
        for usec, calls, name in rows[:top]
    ]


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def loadavg_text() -> str:
    """The 1, 5 and 15 minute load averages as ``/proc/loadavg`` writes them (the
    Spark benches record this form)."""
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def report_head(
    name: str, argv: list[str] | None, args: Any, note: str
) -> dict[str, Any]:
    """The fields every bench's JSON report starts with: what ran, when, with which
    arguments, on which machine, and what shared the CPUs."""
    return {
        "benchmark": name,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            [f"python -m bench.{name}", *(argv if argv is not None else sys.argv[1:])]
        ),
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": machine(),
        "note": note,
    }
