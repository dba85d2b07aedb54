"""Ingest benchmark: the real stack (`lb up`) on loopback, measured from outside.

    python -m bench.ingest [--batch-events N] [--concurrency C] [--single-rate R]
                           [--single-seconds S] [--players P] [--out DIR]

Starts `lb up --port <free port>` in a fresh temporary LB_DATA_DIR (LB_RATE_LIMIT=off,
the default ``appendfsync always``), always runs `lb down` at the end, then reports:

a. accepted events/s through ``POST /v1/score-events:batch`` (batches of 1000 signed
   events, C concurrent connections), p50/p99 latency per batch request;
b. single ``POST /v1/score-events`` at a fixed offered rate (open loop), p50/p99/max
   latency measured from each request's scheduled send time, achieved rate, errors;
c. Redis bytes per dedupe record and per contribution record (``MEMORY USAGE`` of
   sampled bucket hashes over the records they hold) and ``used_memory`` growth per
   accepted event.

The load generator runs on the same machine as the API and Redis and competes with
them for the CPU; the results say so.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis
import yaml

from api.security import sign

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
RESULTS_DIR = Path(__file__).resolve().parent / "results"


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


def bench_boards_config(now: datetime) -> dict[str, Any]:
    """The packaged default boards with one season, ``BENCH``, open around ``now``.

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
    return dict(config)


def bench_boards(now: datetime | None = None) -> Any:
    """:func:`bench_boards_config` validated, for benchmarks that run in process."""
    from conf.boards import BoardsConfig

    return BoardsConfig.model_validate(bench_boards_config(now or datetime.now(UTC)))


def bench_boards_file(directory: Path, now: datetime) -> Path:
    """:func:`bench_boards_config` as a boards file, for `lb up`'s LB_BOARDS_FILE."""
    path = directory / "bench-boards.yaml"
    path.write_text(yaml.safe_dump(bench_boards_config(now), sort_keys=False))
    return path


def stack_env(data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("LB_REDIS_URL", "LB_APPENDFSYNC", "LB_PARTITIONS"):
        env.pop(name, None)  # the defaults a user gets: local Redis, fsync always
    data_dir.mkdir(parents=True, exist_ok=True)
    env["LB_BOARDS_FILE"] = str(bench_boards_file(data_dir, datetime.now(UTC)))
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
    accepted: int = 0
    other_status: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)

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
        if not isinstance(result.get("position"), int) or result["position"] < 1:
            problems.append("position")
        if problems:
            if len(self.bad) < 10:
                self.bad.append(f"{sent['eventId']}: {', '.join(problems)}")
            return
        self.accepted += 1


# --------------------------------------------------------------------------- a. batch


async def bench_batch(
    url: str,
    factory: EventFactory,
    total_events: int,
    batch_size: int,
    concurrency: int,
    max_seconds: float,
    client_kind: str,
    meter: CpuMeter | None = None,
) -> dict[str, Any]:
    batches = []
    for b in range((total_events + batch_size - 1) // batch_size):
        events = [
            factory.event(f"b{b}")
            for _ in range(min(batch_size, total_events - b * batch_size))
        ]
        batches.append((events, orjson.dumps({"events": events})))
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(batches)):
        queue.put_nowait(i)
    latencies: list[float] = []
    verify = Verify()
    http_errors: dict[str, int] = {}
    sent_counts: list[int] = []
    # Replies are checked after the clock stops: the generator shares the cores
    # with the API and Redis, and parsing and checking 1,000 results per reply
    # (~15 us per event) is the bench's work, not load.
    replies: list[tuple[int, bytes]] = []
    deadline = 0.0
    kind = ""

    async def worker(client: Client) -> None:
        while time.perf_counter() < deadline:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            events, body = batches[i]
            sent_counts.append(len(events))
            started = time.perf_counter()
            try:
                status, content = await client.post(
                    "/v1/score-events:batch", body, signed(body)
                )
            except client.errors as exc:
                name = type(exc).__name__
                http_errors[name] = http_errors.get(name, 0) + 1
                continue
            latencies.append(time.perf_counter() - started)
            if status != 200:
                http_errors[str(status)] = http_errors.get(str(status), 0) + 1
                continue
            replies.append((i, content))

    async with Client(url, concurrency, 120, client_kind) as client:
        kind = client.kind
        # Warm up the connections (and the server) with tiny batches outside the clock.
        for w in range(concurrency):
            warm = [factory.event(f"warm{w}") for _ in range(10)]
            wbody = orjson.dumps({"events": warm})
            await client.post("/v1/score-events:batch", wbody, signed(wbody))
        started = time.perf_counter()
        deadline = started + max_seconds
        await asyncio.gather(*[worker(client) for _ in range(concurrency)])
        elapsed = time.perf_counter() - started
        if meter is not None:
            meter.halt()
    for i, content in replies:
        events = batches[i][0]
        results = orjson.loads(content)["results"]
        if len(results) != len(events):
            http_errors["result_count"] = http_errors.get("result_count", 0) + 1
            continue
        for sent, result in zip(events, results, strict=True):
            verify.check(sent, result)
    return {
        "http_client": kind,
        "batch_size": batch_size,
        "replies_checked_after_the_clock": True,
        "concurrency": concurrency,
        "batches_sent": len(latencies),
        "events_planned": total_events,
        "events_sent": sum(sent_counts),
        "elapsed_s": round(elapsed, 3),
        "accepted": verify.accepted,
        "accepted_per_s": round(verify.accepted / elapsed, 1),
        "other_status": verify.other_status,
        "event_errors": verify.errors,
        "http_errors": http_errors,
        "verification_failures": verify.bad,
        "latency_per_batch": summarize_ms(latencies),
    }


# --------------------------------------------------------------------------- b. single


async def bench_single(
    url: str,
    factory: EventFactory,
    rate: float,
    seconds: float,
    connections: int,
    client_kind: str,
    gc_freeze: bool = True,
) -> dict[str, Any]:
    from bench.reads import GcPauses

    n = int(rate * seconds)
    # Pre-build and pre-sign every request so the generator spends its time sending.
    requests = []
    for _ in range(n):
        ev = factory.event("s")
        body = orjson.dumps(ev)
        requests.append((ev, body, signed(body)))
    from_schedule: list[float] = []
    service: list[float] = []
    # (scheduled send on the monotonic clock, latency from it): which slow
    # requests were in flight during one of the generator's GC pauses.
    timed: list[tuple[float, float]] = []
    to_monotonic = time.monotonic() - time.perf_counter()
    verify = Verify()
    errors: dict[str, int] = {}

    async with Client(url, connections, 30, client_kind) as client:
        kind = client.kind
        warm = factory.event("warm1")
        wbody = orjson.dumps(warm)
        for _ in range(3):
            await client.post("/v1/score-events", wbody, signed(wbody))

        async def one(
            scheduled: float, ev: dict[str, Any], body: bytes, headers: dict[str, str]
        ) -> None:
            sent = time.perf_counter()
            try:
                status, content = await client.post("/v1/score-events", body, headers)
            except client.errors as exc:
                name = type(exc).__name__
                errors[name] = errors.get(name, 0) + 1
                return
            done = time.perf_counter()
            from_schedule.append(done - scheduled)
            service.append(done - sent)
            timed.append((scheduled + to_monotonic, done - scheduled))
            if status != 200:
                errors[str(status)] = errors.get(str(status), 0) + 1
                return
            verify.check(ev, orjson.loads(content))

        # The generator's own full collections stop its event loop, which shows as
        # latency of every request in flight (bench/RESULTS.md, issue 13: one
        # 150 ms pause is a p99 at 500 req/s). After a 100,000-event batch phase
        # and with every request pre-built, its heap is large: everything alive now
        # lives to the end, so keep it out of the collector's walks.
        if gc_freeze:
            gc.collect()
            gc.freeze()
        tasks = []
        with GcPauses() as pauses:
            started = time.perf_counter()
            for i, (ev, body, headers) in enumerate(requests):
                scheduled = started + i / rate
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(scheduled, ev, body, headers)))
            send_done = time.perf_counter()
            await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - started
        if gc_freeze:
            gc.unfreeze()
    return {
        "http_client": kind,
        "offered_rate_per_s": rate,
        "duration_s": seconds,
        "requests": n,
        "connections": connections,
        "completed": len(from_schedule),
        "achieved_rate_per_s": round(len(from_schedule) / elapsed, 1),
        "send_phase_s": round(send_done - started, 3),
        "elapsed_s": round(elapsed, 3),
        "accepted": verify.accepted,
        "other_status": verify.other_status,
        "errors": errors,
        "verification_failures": verify.bad,
        "latency_from_schedule": summarize_ms(from_schedule),
        "latency_service": summarize_ms(service),
        "generator_gc_frozen": gc_freeze,
        "generator_gc": pauses.report(
            [t for t, _ in timed], [latency for _, latency in timed], over_ms=20.0
        ),
    }


# --------------------------------------------------------------------------- d. ceiling


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


# --------------------------------------------------------------------------- c. memory


def record_memory(client: redis.Redis, pattern: str, samples: int) -> dict[str, Any]:
    """Bytes per record of records kept as fields of bucket hashes
    (speed/records.py): ``MEMORY USAGE`` of whole sampled buckets (key, table and
    every field) over the records they hold."""
    keys: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        keys.append(key)
        if len(keys) >= samples:
            break
    sizes = [client.memory_usage(k, samples=0) or 0 for k in keys]
    records = sum(int(client.hlen(k)) for k in keys)
    return {
        "pattern": pattern,
        "sampled_keys": len(keys),
        "records": records,
        "encodings": sorted({str(client.object("encoding", k)) for k in keys}),
        "avg_bytes": round(sum(sizes) / records, 1) if records else None,
    }


def redis_facts(client: redis.Redis) -> dict[str, Any]:
    info = client.info()
    return {
        "aof_bytes": info.get("aof_current_size", 0),
        "used_memory": info["used_memory"],
        "keys": client.dbsize(),
        "aof_enabled": info.get("aof_enabled"),
        "appendfsync": client.config_get("appendfsync").get("appendfsync"),
    }


def commandstats(client: redis.Redis) -> dict[str, Any]:
    stats = client.info("commandstats")
    return {
        k: {"calls": v["calls"], "usec_per_call": v["usec_per_call"]}
        for k, v in stats.items()
    }


# --------------------------------------------------------------------------- groups


def group_commits(url: str) -> tuple[float, float]:
    """(groups sent, apply() calls in them) so far, summed over the API's workers:
    the ``lb_speed_group_commit_calls`` histogram of /metrics (speed/store.py)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = {"count": 0.0, "sum": 0.0}
    for line in text.splitlines():
        for part in found:
            if line.startswith(f"lb_speed_group_commit_calls_{part} "):
                found[part] = float(line.rsplit(" ", 1)[1])
    return found["count"], found["sum"]


def group_commit_delta(
    before: tuple[float, float], after: tuple[float, float]
) -> dict[str, Any]:
    groups, calls = after[0] - before[0], after[1] - before[1]
    return {
        "groups": int(groups),
        "calls": int(calls),
        "calls_per_group": round(calls / groups, 2) if groups else None,
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


# --------------------------------------------------------------------------- main


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


def _ceiling_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    d = report.get("speed_layer")
    if not d:
        return []
    evalsha = report.get("redis_commandstats_speed_layer", {}).get(
        "cmdstat_evalsha", {}
    )
    return [
        (
            "speed layer alone: accepted events/s",
            f"{d['accepted_per_s']:.0f}",
            f"no HTTP; {d['accepted']} accepted in {d['elapsed_s']} s; Redis EVALSHA "
            f"{evalsha.get('usec_per_call', '-')} us/call",
        ),
        ("speed layer: CPU us/event api|redis|generator", _cpu_cell(d), _cpu_other(d)),
    ]


def _cpu_cell(phase: dict[str, Any]) -> str:
    cpu = phase.get("cpu") or {}
    return "|".join(
        str(cpu.get(f"{n}_cpu_us_per_event", "-"))
        for n in ("api", "redis", "generator")
    )


def _cpu_other(phase: dict[str, Any]) -> str:
    cpu = phase.get("cpu") or {}
    if not cpu:
        return ""
    return (
        f"other processes {cpu['other_processes_cpu_s']} CPU-s, idle "
        f"{cpu['machine_idle_cpu_s']} CPU-s over {cpu['wall_s']} s wall"
    )


def print_table(report: dict[str, Any]) -> None:
    a, b, c = report["batch"], report["single"], report["memory"]
    pauses = b.get("generator_gc") or {}
    rows = [
        (
            "batch: accepted events/s",
            f"{a['accepted_per_s']:.0f}",
            f"target >= 10000; {a['accepted']} accepted in {a['elapsed_s']} s, "
            f"{a['concurrency']} connections",
        ),
        (
            "batch: latency per 1000-event request",
            f"p50 {a['latency_per_batch']['p50_ms']} ms",
            f"p99 {a['latency_per_batch']['p99_ms']} ms, "
            f"max {a['latency_per_batch']['max_ms']} ms",
        ),
        (
            "batch: not accepted",
            str(sum(a["other_status"].values()) + sum(a["event_errors"].values())),
            f"http errors {a['http_errors'] or 0}, "
            f"verify failures {len(a['verification_failures'])}",
        ),
        ("batch: CPU us/event api|redis|generator", _cpu_cell(a), _cpu_other(a)),
        (
            "single: offered / achieved req/s",
            f"{b['offered_rate_per_s']:.0f} / {b['achieved_rate_per_s']:.0f}",
            f"{b['requests']} requests, {b['accepted']} accepted, "
            f"errors {b['errors'] or 0}",
        ),
        (
            "single: latency (from schedule)",
            f"p50 {b['latency_from_schedule']['p50_ms']} ms",
            f"p99 {b['latency_from_schedule']['p99_ms']} ms (target <= 20), "
            f"max {b['latency_from_schedule']['max_ms']} ms",
        ),
        (
            "single: latency (service)",
            f"p50 {b['latency_service']['p50_ms']} ms",
            f"p99 {b['latency_service']['p99_ms']} ms, "
            f"max {b['latency_service']['max_ms']} ms",
        ),
        ("single: CPU us/event api|redis|generator", _cpu_cell(b), _cpu_other(b)),
        (
            "single: generator GC pauses",
            f"max {pauses.get('max_ms', '-')} ms",
            f"collections {pauses.get('collections', '-')}, slow (> 20 ms) requests "
            "in flight during a pause >= 5 ms: "
            f"{pauses.get('of_them_in_flight_during_a_pause_over_5ms', '-')} of "
            f"{pauses.get('slow_over_20ms', '-')}",
        ),
        (
            "single: requests per group commit",
            str((b.get("group_commit") or {}).get("calls_per_group", "-")),
            f"{(b.get('group_commit') or {}).get('groups', '-')} groups "
            "(lb_speed_group_commit_calls, LB_GROUP_COMMIT_US)",
        ),
        *_ceiling_rows(report),
        (
            "redis: bytes / dedupe record",
            f"{c['dedupe']['avg_bytes']}",
            f"MEMORY USAGE of {c['dedupe']['sampled_keys']} buckets / "
            f"{c['dedupe']['records']} records",
        ),
        (
            "redis: bytes / contribution record",
            f"{c['contribution']['avg_bytes']}",
            f"MEMORY USAGE of {c['contribution']['sampled_keys']} buckets / "
            f"{c['contribution']['records']} records",
        ),
        (
            "redis: used_memory / event",
            f"{c['used_memory_per_event']}",
            f"{c['used_memory_delta']} bytes over {c['events_in_redis']} events",
        ),
        (
            "redis: AOF bytes / event",
            f"{c['aof_bytes_per_event']}",
            f"aof_current_size {c['aof_bytes']}",
        ),
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print()
    print(f"{'measurement'.ljust(w0)}  {'value'.ljust(w1)}  detail")
    print(f"{'-' * w0}  {'-' * w1}  {'-' * 40}")
    for name, value, detail in rows:
        print(f"{name.ljust(w0)}  {value.ljust(w1)}  {detail}")
    print()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.ingest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--batch-events",
        type=int,
        default=100_000,
        help="events sent through the batch endpoint (default 100000)",
    )
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="concurrent batch connections (default 4)",
    )
    p.add_argument(
        "--batch-max-seconds",
        type=float,
        default=60,
        help="stop sending batches after this long (default 60)",
    )
    p.add_argument(
        "--single-rate",
        type=float,
        default=500,
        help="offered single-POST rate, requests/s (default 500)",
    )
    p.add_argument("--single-seconds", type=float, default=20)
    p.add_argument(
        "--single-connections",
        type=int,
        default=64,
        help="connection pool size for single POSTs (default 64)",
    )
    p.add_argument("--batch-client", choices=("httpx", "aiohttp"), default="httpx")
    p.add_argument(
        "--single-client",
        choices=("httpx", "aiohttp"),
        default="aiohttp",
        help="aiohttp when installed (default), else httpx",
    )
    p.add_argument("--players", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--memory-samples", type=int, default=500)
    p.add_argument(
        "--ceiling-events",
        type=int,
        default=30_000,
        help="events for the speed-layer-only run, no HTTP (0 skips; default 30000)",
    )
    p.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="leave the generator's heap to the collector in the single phase "
        "(for comparison; its pauses are reported either way)",
    )
    p.add_argument("--skip-batch", action="store_true")
    p.add_argument("--skip-single", action="store_true")
    p.add_argument("--keep-data", action="store_true", help="keep the temp LB_DATA_DIR")
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    return p.parse_args(argv)


async def run(
    url: str, redis_url: str, args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, Any]:
    client = redis.Redis.from_url(redis_url)
    factory = EventFactory(args.players, args.seed, datetime.now(UTC))
    before = redis_facts(client)
    client.config_resetstat()
    client.slowlog_reset()
    report: dict[str, Any] = {}
    empty_batch = {
        "accepted": 0,
        "accepted_per_s": 0.0,
        "elapsed_s": 0,
        "concurrency": 0,
        "latency_per_batch": summarize_ms([]),
        "other_status": {},
        "event_errors": {},
        "http_errors": {},
        "verification_failures": [],
    }
    if args.skip_batch:
        report["batch"] = empty_batch
    else:
        print(
            f"a. batch: {args.batch_events} events, batches of {args.batch_size}, "
            f"{args.concurrency} connections ...",
            flush=True,
        )
        meter = CpuMeter(pids, trees=API_TREE)
        report["batch"] = await bench_batch(
            url,
            factory,
            args.batch_events,
            args.batch_size,
            args.concurrency,
            args.batch_max_seconds,
            args.batch_client,
            meter,
        )
        report["batch"]["cpu"] = meter.stop(report["batch"]["accepted"])
        report["batch"]["top_processes_after"] = top_processes()
        report["redis_commandstats_batch"] = commandstats(client)
        report["redis_slowlog_batch"] = [
            {
                "duration_us": e["duration"],
                "command": e["command"][:120].decode(errors="replace")
                if isinstance(e["command"], bytes)
                else str(e["command"])[:120],
            }
            for e in client.slowlog_get(10)
        ]
    after_batch = redis_facts(client)
    client.config_resetstat()
    if args.skip_single:
        report["single"] = {
            "offered_rate_per_s": 0,
            "achieved_rate_per_s": 0,
            "requests": 0,
            "accepted": 0,
            "errors": {},
            "latency_from_schedule": summarize_ms([]),
            "latency_service": summarize_ms([]),
        }
    else:
        print(
            f"b. single: {args.single_rate:.0f} req/s for {args.single_seconds:.0f} s, "
            "open loop ...",
            flush=True,
        )
        meter = CpuMeter(pids, trees=API_TREE)
        groups_before = group_commits(url)
        report["single"] = await bench_single(
            url,
            factory,
            args.single_rate,
            args.single_seconds,
            args.single_connections,
            args.single_client,
            gc_freeze=not args.no_gc_freeze,
        )
        report["single"]["cpu"] = meter.stop(report["single"]["accepted"])
        report["single"]["group_commit"] = group_commit_delta(
            groups_before, group_commits(url)
        )
        report["single"]["top_processes_after"] = top_processes()
        report["redis_commandstats_single"] = commandstats(client)
    if args.ceiling_events > 0:
        client.config_resetstat()
        print(
            f"d. speed layer alone (no HTTP): {args.ceiling_events} events ...",
            flush=True,
        )
        meter = CpuMeter(pids, trees=API_TREE)
        report["speed_layer"] = await bench_speed_layer(
            redis_url, factory, args.ceiling_events, args.batch_size, args.concurrency
        )
        report["speed_layer"]["cpu"] = meter.stop(report["speed_layer"]["accepted"])
        report["redis_commandstats_speed_layer"] = commandstats(client)
    after = redis_facts(client)
    events_in_redis = sum(int(client.get(k) or 0) for k in client.scan_iter("lb:*:pos"))
    delta = after["used_memory"] - before["used_memory"]
    report["memory"] = {
        # Bucket hashes of records (speed/records.py): bytes per record held.
        "dedupe": record_memory(client, "lb:*:rd:*", args.memory_samples),
        "contribution": record_memory(client, "lb:*:rc:*", args.memory_samples),
        "used_memory_before": before["used_memory"],
        "used_memory_after_batch": after_batch["used_memory"],
        "used_memory_after": after["used_memory"],
        "used_memory_delta": delta,
        "events_in_redis": events_in_redis,
        "used_memory_per_event": round(delta / events_in_redis, 1)
        if events_in_redis
        else None,
        "keys": after["keys"],
        "aof_bytes": after["aof_bytes"],
        "aof_bytes_per_event": round(after["aof_bytes"] / events_in_redis, 1)
        if events_in_redis and after["aof_bytes"]
        else None,
    }
    report["redis"] = {
        "appendfsync": after["appendfsync"],
        "aof_enabled": after["aof_enabled"],
    }
    client.close()
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir = Path(tempfile.mkdtemp(prefix="lb-bench-"))
    env = stack_env(data_dir)
    port = free_port()
    report: dict[str, Any] = {
        "benchmark": "ingest",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            ["python -m bench.ingest", *(argv if argv is not None else sys.argv[1:])]
        ),
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": machine(),
        "note": (
            "load generator, API (uvicorn: supervisor + workers, api_cpu_s sums "
            "them) and Redis share the CPUs"
        ),
    }
    code = 0
    try:
        print(
            f"lb up --port {port}  (LB_DATA_DIR={data_dir}, LB_RATE_LIMIT=off)",
            flush=True,
        )
        print(lb(["up", "--port", str(port)], env), flush=True)
        url = f"http://127.0.0.1:{port}"
        run_dir = data_dir / "run"
        redis_url = (run_dir / "redis.url").read_text().strip()
        pids = {
            "api": int((run_dir / "api.pid").read_text()),
            "redis": int((run_dir / "redis.pid").read_text()),
            "generator": os.getpid(),
        }
        report["load_before"] = {"loadavg": os.getloadavg(), "top": top_processes()}
        report.update(asyncio.run(run(url, redis_url, args, pids)))
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        print(f"bench failed: {report['error']}", file=sys.stderr)
        code = 1
        if not isinstance(exc, Exception):
            raise
    finally:
        try:
            print(lb(["down"], env), flush=True)
        except Exception as exc:  # noqa: BLE001 - report, still clean up the temp dir
            print(f"lb down failed: {exc}", file=sys.stderr)
            code = 1
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
    if "batch" in report and "memory" in report:
        print_table(report)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out / f"ingest-{stamp}.json"
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"results: {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
