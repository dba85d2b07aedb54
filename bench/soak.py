"""Soak: the real stack (`lb up`) under mixed writes, reads and publishes for
minutes, with memory over time and an oracle check at the end.

    python -m bench.soak [--seconds 600] [--write-rate 500] [--batch-size 10]
                         [--read-rate 200] [--publish-every 180] [--players 10000]

1. `lb up --port <free port>` in a fresh temporary LB_DATA_DIR (bench.harness'
   boards, LB_RATE_LIMIT=off, otherwise the defaults); always `lb down` at the end.
2. For ``--seconds``, open loop (latency from each request's scheduled send):
   signed writes at ``--write-rate`` events/s in requests of ``--batch-size``
   events (1: ``POST /v1/score-events``; more: ``:batch``). The default is
   batches of 10 (50 requests/s): the 2-core machine then holds the writes, the
   reads and a Spark publish at once. Of the events, ``--redeliver`` are
   redeliveries of an acknowledged event (same eventId and body: must answer
   ``duplicate``) and ``--correct`` corrections of an acknowledged match (the
   next sourceRevision, new points), the rest new matches.
   Reads at ``--read-rate`` GETs/s: live top-100, player rank and nearby, and
   (once a generation exists) snapshot top and rank, on four boards.
   ``lb publish`` every ``--publish-every`` seconds in a subprocess (timed; one
   at a time).
3. Every 10 s: Redis ``used_memory``, the API's RSS (uvicorn's supervisor and its
   workers, ``VmRSS``), events acknowledged, write and read p50/p99 and errors in
   the window, the load average.
4. At the end: the load stops, ``lb publish`` once more, then the oracle: from
   every acknowledged event (accepted matches with the boards they were applied
   to; an accepted correction replaces its match's points), the expected total of
   every (board, player) on the season's global board and a daily board, compared
   with the live answer of every player (``GET .../players/{p}``) and with the
   final generation read by paging ``entries``.

Exit 1 when the oracle finds a mismatch, any 5xx answered, a redelivery did not
answer ``duplicate``, or the final publish failed. Results: bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from bench.harness import (
    BENCH_SEASON,
    Client,
    EventFactory,
    free_port,
    lb_command,
    loadavg,
    percentile,
    report_head,
    signed,
    stack_env,
    start_stack,
    stop_stack,
    summarize_ms,
)
from bench.reads import child_pids

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SAMPLE_S = 10.0
SEASON_GLOBAL = f"season:{BENCH_SEASON}:global"


# --------------------------------------------------------------------------- state


@dataclass
class Match:
    player: str
    boards: list[str]  # the boards the original was applied to
    revision: int
    points: int  # of the accepted event with the highest revision
    correcting: bool = False


@dataclass
class Window:
    """What happened since the last sample."""

    write_lat: list[float] = field(default_factory=list)
    read_lat: list[float] = field(default_factory=list)
    write_errors: int = 0
    read_errors: int = 0
    acked: int = 0


@dataclass
class State:
    matches: dict[str, Match] = field(default_factory=dict)
    recent: deque[tuple[str, bytes]] = field(
        default_factory=lambda: deque(maxlen=20_000)
    )  # (eventId, body) of acknowledged events, for redeliveries
    players: list[str] = field(default_factory=list)  # with an accepted match
    seen_players: set[str] = field(default_factory=set)
    statuses: Counter[str] = field(default_factory=Counter)
    http: Counter[str] = field(default_factory=Counter)  # "write 200", "read 404"
    errors: Counter[str] = field(default_factory=Counter)
    redelivery_not_duplicate: list[str] = field(default_factory=list)
    write_lat: list[float] = field(default_factory=list)
    read_lat: dict[str, list[float]] = field(default_factory=dict)
    acked: int = 0
    generation: str | None = None
    window: Window = field(default_factory=Window)

    def server_errors(self) -> int:
        return sum(n for k, n in self.http.items() if k.split()[-1].startswith("5"))


# --------------------------------------------------------------------------- rss


def tree_rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` and its children (uvicorn's supervisor and workers)."""
    total = 0
    for member in [pid, *child_pids(pid)]:
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def api_pid(data_dir: Path) -> int:
    """The API's pid now (`lb up` restarts a dead API: read it each time)."""
    try:
        return int((data_dir / "run" / "api.pid").read_text())
    except (OSError, ValueError):
        return 0


# --------------------------------------------------------------------------- writes


def correction_of(
    match_id: str, match: Match, original: dict[str, Any], rng: random.Random
) -> dict[str, Any]:
    body = dict(original)
    revision = match.revision + 1
    body.update(
        eventId=f"{match_id}-c{revision}",
        sourceRevision=revision,
        result={"points": rng.randrange(0, 1000)},
        kind="correction",
        reason="soak correction",
    )
    return body


async def write_load(
    client: Client, args: argparse.Namespace, state: State, t0: float
) -> None:
    rng = random.Random(args.seed)
    factory = EventFactory(args.players, args.seed, datetime.now(UTC))
    originals: dict[str, dict[str, Any]] = {}  # matchId -> the original body
    match_ids: list[str] = []
    loop = asyncio.get_running_loop()
    rate = args.write_rate / args.batch_size
    count = int(rate * args.seconds)
    path = "/v1/score-events" if args.batch_size == 1 else "/v1/score-events:batch"
    tasks: set[asyncio.Task[None]] = set()

    def compose() -> list[tuple[str, dict[str, Any] | None, bytes]]:
        """(kind, body as dict or None for a redelivery, body bytes) per event."""
        items: list[tuple[str, dict[str, Any] | None, bytes]] = []
        for _ in range(args.batch_size):
            r = rng.random()
            if r < args.redeliver and state.recent:
                event_id, raw = state.recent[rng.randrange(len(state.recent))]
                items.append(("redelivery", None, raw))
                continue
            if r < args.redeliver + args.correct and match_ids:
                match_id = match_ids[rng.randrange(len(match_ids))]
                match = state.matches[match_id]
                if not match.correcting:
                    match.correcting = True
                    body = correction_of(match_id, match, originals[match_id], rng)
                    items.append(("correction", body, orjson.dumps(body)))
                    continue
            body = factory.event("soak")
            items.append(("new", body, orjson.dumps(body)))
        return items

    def record(kind: str, body: dict[str, Any] | None, raw: bytes, reply: Any) -> None:
        if "error" in reply:
            state.errors[f"write {reply['error']}"] += 1
            state.window.write_errors += 1
            if kind == "correction" and body is not None:
                state.matches[body["matchId"]].correcting = False
            return
        status = str(reply.get("status"))
        state.statuses[f"{kind} {status}"] += 1
        if kind == "redelivery":
            if status != "duplicate" and len(state.redelivery_not_duplicate) < 20:
                state.redelivery_not_duplicate.append(
                    f"{reply.get('eventId')}: {status}"
                )
            return
        assert body is not None
        if kind == "correction":
            match = state.matches[body["matchId"]]
            match.correcting = False
            if status == "accepted" and body["sourceRevision"] > match.revision:
                match.revision = body["sourceRevision"]
                match.points = body["result"]["points"]
        elif status == "accepted":
            applied = [
                b["board"]
                for b in reply.get("boards", [])
                if b.get("status", "accepted") == "accepted"
            ]
            state.matches[body["matchId"]] = Match(
                body["playerId"], applied, 1, body["result"]["points"]
            )
            originals[body["matchId"]] = body
            match_ids.append(body["matchId"])
            if body["playerId"] not in state.seen_players:
                state.seen_players.add(body["playerId"])
                state.players.append(body["playerId"])
        else:
            return
        state.acked += 1
        state.window.acked += 1
        state.recent.append((body["eventId"], raw))

    async def one(scheduled: float) -> None:
        items = compose()
        if args.batch_size == 1:
            payload = items[0][2]
        else:
            payload = b'{"events":[' + b",".join(raw for _, _, raw in items) + b"]}"
        try:
            status, content = await client.post(path, payload, signed(payload))
        except client.errors as exc:
            state.errors[f"write {type(exc).__name__}"] += 1
            state.window.write_errors += 1
            for kind, body, _ in items:
                if kind == "correction" and body is not None:
                    state.matches[body["matchId"]].correcting = False
            return
        latency = loop.time() - scheduled
        state.http[f"write {status}"] += 1
        if status != 200:
            state.window.write_errors += 1
            for kind, body, _ in items:
                if kind == "correction" and body is not None:
                    state.matches[body["matchId"]].correcting = False
            return
        state.write_lat.append(latency)
        state.window.write_lat.append(latency)
        reply = orjson.loads(content)
        replies = [reply] if args.batch_size == 1 else reply["results"]
        for (kind, body, raw), result in zip(items, replies, strict=True):
            record(kind, body, raw, result)

    for k in range(count):
        scheduled = t0 + k / rate
        delay = scheduled - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


# --------------------------------------------------------------------------- reads


def read_boards(day: str) -> list[str]:
    return [SEASON_GLOBAL, f"season:{BENCH_SEASON}:eu", f"daily:{day}:global"] + [
        "alltime:all:global"
    ]


async def read_load(
    session: Any, url: str, args: argparse.Namespace, state: State, t0: float
) -> None:
    import aiohttp

    rng = random.Random(args.seed + 1)
    loop = asyncio.get_running_loop()
    boards = read_boards(datetime.now(UTC).strftime("%Y-%m-%d"))
    count = int(args.read_rate * args.seconds)
    tasks: set[asyncio.Task[None]] = set()
    kinds = ("live_top", "live_rank", "live_nearby", "snapshot_top", "snapshot_rank")
    weights = (0.25, 0.3, 0.25, 0.1, 0.1)

    def pick() -> tuple[str, str]:
        kind = rng.choices(kinds, weights)[0]
        if kind.startswith("snapshot") and state.generation is None:
            kind = kind.replace("snapshot", "live")
        board = boards[rng.randrange(len(boards))]
        player = state.players[rng.randrange(len(state.players))]
        base = f"{url}/v1/boards/{board}"
        mode = "snapshot" if kind.startswith("snapshot") else "live"
        if kind.endswith("top"):
            return kind, f"{base}/top?limit=100&mode={mode}"
        if kind.endswith("rank"):
            return kind, f"{base}/players/{player}?mode={mode}"
        return kind, f"{base}/players/{player}/nearby?radius=5&mode={mode}"

    async def one(scheduled: float) -> None:
        kind, target = pick()
        try:
            async with session.get(target) as reply:
                await reply.read()
                status = reply.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            state.errors[f"read {type(exc).__name__}"] += 1
            state.window.read_errors += 1
            return
        latency = loop.time() - scheduled
        state.http[f"read {status}"] += 1
        # 404: a player not (yet) on that board (e.g. no eu match); not an error.
        if status not in (200, 404):
            state.window.read_errors += 1
            return
        state.read_lat.setdefault(kind, []).append(latency)
        state.window.read_lat.append(latency)

    while not state.players:  # nothing to read before the first acknowledgement
        if loop.time() - t0 > args.seconds:
            return
        await asyncio.sleep(0.05)
    for k in range(count):
        scheduled = t0 + k / args.read_rate
        delay = scheduled - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if loop.time() - t0 > args.seconds:
            break
        task = asyncio.create_task(one(scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


# --------------------------------------------------------------------------- publish


async def publish(env: dict[str, str], t0: float) -> dict[str, Any]:
    """`lb publish` in a subprocess: its start, duration and generation."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    proc = await asyncio.create_subprocess_exec(
        *lb_command(),
        "publish",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    lines = out.decode().strip().splitlines()
    result: dict[str, Any] = {
        "at_s": round(start - t0, 1),
        "duration_s": round(loop.time() - start, 1),
        "rc": proc.returncode,
        "generation": lines[-1].strip() if lines and proc.returncode == 0 else None,
        "loadavg_after": loadavg(),
    }
    if proc.returncode != 0:
        result["output"] = (out.decode() + err.decode())[-3000:]
    return result


async def publisher(
    env: dict[str, str], args: argparse.Namespace, state: State, t0: float, out: list
) -> None:
    loop = asyncio.get_running_loop()
    k = 1
    while True:
        due = t0 + k * args.publish_every
        if due >= t0 + args.seconds:
            return
        await asyncio.sleep(max(0.0, due - loop.time()))
        result = await publish(env, t0)  # one at a time: a late one delays the next
        out.append(result)
        if result["generation"]:
            state.generation = result["generation"]
        print(f"  publish at {result['at_s']} s: {result}", flush=True)
        k = max(k + 1, int((loop.time() - t0) // args.publish_every) + 1)


# --------------------------------------------------------------------------- samples


async def sampler(
    redis_url: str, data_dir: Path, state: State, t0: float, out: list
) -> None:
    import redis.asyncio as aioredis

    loop = asyncio.get_running_loop()
    client = aioredis.from_url(redis_url)
    k = 0
    try:
        while True:
            await asyncio.sleep(max(0.0, t0 + k * SAMPLE_S - loop.time()))
            w, state.window = state.window, Window()
            try:
                info = await client.info("memory")
                used = int(info["used_memory"])
                rss = int(info.get("used_memory_rss", 0))
            except Exception as exc:  # noqa: BLE001 - a sample, not the soak
                state.errors[f"sample {type(exc).__name__}"] += 1
                used = rss = -1
            sample = {
                "t_s": round(loop.time() - t0, 1),
                "redis_used_memory": used,
                "redis_rss": rss,
                "api_rss_kib": tree_rss_kib(api_pid(data_dir)),
                "acked_total": state.acked,
                "acked_in_window": w.acked,
                "write_p50_ms": round(percentile(w.write_lat, 50) * 1000, 1),
                "write_p99_ms": round(percentile(w.write_lat, 99) * 1000, 1),
                "write_errors": w.write_errors,
                "reads": len(w.read_lat),
                "read_p50_ms": round(percentile(w.read_lat, 50) * 1000, 1),
                "read_p99_ms": round(percentile(w.read_lat, 99) * 1000, 1),
                "read_errors": w.read_errors,
                "loadavg": loadavg(),
            }
            out.append(sample)
            k += 1
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- oracle


def expected_totals(state: State, board: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for match in state.matches.values():
        if board in match.boards:
            totals[match.player] = totals.get(match.player, 0) + match.points
    return totals


async def check_live(
    session: Any, url: str, state: State, board: str, want: dict[str, int]
) -> tuple[int, list[str]]:
    """Every expected player's live answer on ``board``, 16 at a time: how many
    were checked, and the mismatches ("" past the first 20)."""
    bad: list[str] = []
    checked = 0
    queue: asyncio.Queue[str] = asyncio.Queue()
    for player in want:
        queue.put_nowait(player)

    async def lane() -> None:
        nonlocal checked
        while not queue.empty():
            player = queue.get_nowait()
            target = f"{url}/v1/boards/{board}/players/{player}"
            async with session.get(target) as r:
                body = orjson.loads(await r.read())
                status = r.status
            state.http[f"oracle {status}"] += 1
            checked += 1
            if status != 200 or body.get("score") != want[player]:
                got = body.get("score", body)
                bad.append(
                    f"{player}: {status} {got} want {want[player]}"
                    if len(bad) < 20
                    else ""
                )

    await asyncio.gather(*(lane() for _ in range(16)))
    return checked, bad


async def oracle(
    session: Any, url: str, state: State, generation: str
) -> dict[str, Any]:
    days = Counter(
        b.split(":")[1]
        for m in state.matches.values()
        for b in m.boards
        if b.startswith("daily:") and b.endswith(":global")
    )
    boards = [SEASON_GLOBAL]
    if days:
        boards.append(f"daily:{days.most_common(1)[0][0]}:global")
    report: dict[str, Any] = {"generation": generation, "boards": {}}
    for board in boards:
        want = expected_totals(state, board)
        t = time.perf_counter()
        live_checked, live_bad = await check_live(session, url, state, board, want)
        live_s = time.perf_counter() - t

        t = time.perf_counter()
        got: dict[str, int] = {}
        snap_bad: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            # The first page names the generation; a cursor pins it after that.
            query = (
                f"cursor={quote(cursor, safe='')}"
                if cursor
                else f"generation={generation}"
            )
            target = f"{url}/v1/boards/{board}/entries?limit=1000&{query}"
            async with session.get(target) as r:
                body = orjson.loads(await r.read())
                status = r.status
            state.http[f"oracle {status}"] += 1
            pages += 1
            if status != 200:
                snap_bad.append(f"entries page {pages}: {status} {body}")
                break
            gen_id = (body.get("generation") or {}).get("id")
            if gen_id != generation:
                snap_bad.append(f"entries page {pages}: generation {gen_id}")
            for e in body["entries"]:
                if e["playerId"] in got:
                    snap_bad.append(f"{e['playerId']} listed twice")
                got[e["playerId"]] = e["score"]
            cursor = (body.get("cursors") or {}).get("after")
            if not cursor:
                break
        snap_s = time.perf_counter() - t
        for player in sorted(set(want) | set(got)):
            if want.get(player) != got.get(player):
                snap_bad.append(
                    f"{player}: snapshot {got.get(player)} want {want.get(player)}"
                )
        report["boards"][board] = {
            "players": len(want),
            "live_checked": live_checked,
            "live_mismatches": len(live_bad),
            "live_examples": [x for x in live_bad if x][:10],
            "live_s": round(live_s, 1),
            "snapshot_entries": len(got),
            "snapshot_pages": pages,
            "snapshot_mismatches": len(snap_bad),
            "snapshot_examples": snap_bad[:10],
            "snapshot_s": round(snap_s, 1),
        }
    report["mismatches"] = sum(
        b["live_mismatches"] + b["snapshot_mismatches"]
        for b in report["boards"].values()
    )
    return report


# --------------------------------------------------------------------------- run


async def soak(
    args: argparse.Namespace,
    env: dict[str, str],
    data_dir: Path,
    url: str,
    redis_url: str,
    report: dict[str, Any],
) -> None:
    import aiohttp

    state = State()
    samples: list[dict[str, Any]] = []
    publishes: list[dict[str, Any]] = []
    report["samples"], report["publishes"] = samples, publishes
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.2
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=args.connections),
        timeout=aiohttp.ClientTimeout(total=30),
    )
    try:
        async with Client(url, args.connections, 30.0, "aiohttp") as client:
            sample_task = asyncio.create_task(
                sampler(redis_url, data_dir, state, t0, samples)
            )
            publish_task = asyncio.create_task(
                publisher(env, args, state, t0, publishes)
            )
            print(f"soak: {args.seconds:g} s ...", flush=True)
            await asyncio.gather(
                write_load(client, args, state, t0),
                read_load(session, url, args, state, t0),
            )
            load_s = loop.time() - t0
            print(f"load stopped after {load_s:.1f} s", flush=True)
            if not publish_task.done():
                print("waiting for the running publish ...", flush=True)
            await publish_task
            sample_task.cancel()
            await asyncio.gather(sample_task, return_exceptions=True)
            final = await publish(env, t0)
            final["final"] = True
            publishes.append(final)
            print(f"final publish: {final}", flush=True)
            report["load_s"] = round(load_s, 1)
            if final["generation"]:
                await asyncio.sleep(1.0)  # the API notices a generation within 0.5 s
                report["oracle"] = await oracle(
                    session, url, state, final["generation"]
                )
    finally:
        await session.close()
        report["state"] = {
            "acked": state.acked,
            "matches": len(state.matches),
            "players": len(state.players),
            "statuses": dict(state.statuses),
            "http": dict(state.http),
            "errors": dict(state.errors),
            "redelivery_not_duplicate": state.redelivery_not_duplicate,
            "server_errors": state.server_errors(),
        }
        report["write_latency"] = {
            "requests": len(state.write_lat),
            **summarize_ms(state.write_lat),
        }
        report["read_latency"] = {
            kind: {"requests": len(lat), **summarize_ms(lat)}
            for kind, lat in sorted(state.read_lat.items())
        }


def failures(report: dict[str, Any]) -> list[str]:
    out = []
    st = report.get("state", {})
    if st.get("server_errors"):
        out.append(f"{st['server_errors']} 5xx answers")
    if st.get("redelivery_not_duplicate"):
        out.append("redeliveries not answered duplicate")
    oracle_ = report.get("oracle")
    if oracle_ is None:
        out.append("no oracle check (final publish failed?)")
    elif oracle_["mismatches"]:
        out.append(f"{oracle_['mismatches']} oracle mismatches")
    if any(p["rc"] != 0 for p in report.get("publishes", [])):
        out.append("a publish failed")
    if "error" in report:
        out.append(report["error"])
    return out


def print_table(report: dict[str, Any]) -> None:
    samples = report.get("samples", [])
    print("\nmemory over time (a row per minute, and the last sample)")
    print(
        f"{'t s':>6}{'redis used MiB':>16}{'redis rss MiB':>15}{'api rss MiB':>13}"
        f"{'acked':>10}{'ev/s':>7}{'w p99':>8}{'r p50':>7}{'r p99':>8}{'errs':>6}"
        f"{'load1':>7}"
    )
    per_min = int(60 / SAMPLE_S)
    for i, s in enumerate(samples):
        if i % per_min and i != len(samples) - 1:
            continue
        print(
            f"{s['t_s']:>6.0f}{s['redis_used_memory'] / 2**20:>16.1f}"
            f"{s['redis_rss'] / 2**20:>15.1f}{s['api_rss_kib'] / 1024:>13.1f}"
            f"{s['acked_total']:>10}{s['acked_in_window'] / SAMPLE_S:>7.0f}"
            f"{s['write_p99_ms']:>8}{s['read_p50_ms']:>7}{s['read_p99_ms']:>8}"
            f"{s['write_errors'] + s['read_errors']:>6}{s['loadavg'][0]:>7}"
        )
    print("\nlatency (open loop, from the scheduled send)")
    print(f"{'kind':<16}{'requests':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    rows = [("write", report.get("write_latency", {}))]
    rows += list(report.get("read_latency", {}).items())
    for name, lat in rows:
        if lat:
            print(
                f"{name:<16}{lat['requests']:>9}{lat['p50_ms']:>9}{lat['p99_ms']:>9}"
                f"{lat['max_ms']:>9}"
            )
    print("\npublishes")
    for p in report.get("publishes", []):
        print(
            f"  at {p['at_s']:>6} s  {p['duration_s']:>6} s  rc {p['rc']}  "
            f"{p['generation']}{'  (final)' if p.get('final') else ''}"
        )
    st = report.get("state", {})
    print(
        f"\nacknowledged {st.get('acked')} events ({st.get('matches')} matches, "
        f"{st.get('players')} players); statuses {st.get('statuses')}"
    )
    print(f"http {st.get('http')}; errors {st.get('errors')}")
    oracle_ = report.get("oracle")
    if oracle_:
        print(f"\noracle vs generation {oracle_['generation']}")
        for board, b in oracle_["boards"].items():
            print(
                f"  {board:<28} players {b['players']:>7}  live mismatches "
                f"{b['live_mismatches']} ({b['live_s']} s)  snapshot entries "
                f"{b['snapshot_entries']}, mismatches {b['snapshot_mismatches']} "
                f"({b['snapshot_s']} s)"
            )
            for x in b["live_examples"] + b["snapshot_examples"]:
                print(f"    {x}")
    print(f"\n5xx: {st.get('server_errors')}  oracle mismatches: ", end="")
    print(oracle_["mismatches"] if oracle_ else "not checked")
    bad = failures(report)
    print("SOAK " + ("FAILED: " + "; ".join(bad) if bad else "OK"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--write-rate", type=float, default=500.0, help="events/s")
    p.add_argument(
        "--batch-size", type=int, default=10, help="events per request (1: single)"
    )
    p.add_argument("--redeliver", type=float, default=0.05, help="share of events")
    p.add_argument("--correct", type=float, default=0.02, help="share of events")
    p.add_argument("--read-rate", type=float, default=200.0, help="GETs/s")
    p.add_argument("--publish-every", type=float, default=180.0, help="seconds")
    p.add_argument("--players", type=int, default=10_000)
    p.add_argument("--connections", type=int, default=32, help="per client")
    p.add_argument("--seed", type=int, default=23)
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    p.add_argument("--keep-data", action="store_true")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.batch_size > 1000:
        p.error("--batch-size must be 1..1000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir = Path(tempfile.mkdtemp(prefix="lb-soak-"))
    env = stack_env(data_dir)
    port = free_port()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = report_head(
        "soak",
        argv,
        args,
        "load generator, API, Redis and Spark share the CPUs",
    )
    print(f"lb up --port {port}  (LB_DATA_DIR={data_dir})", flush=True)
    try:
        url, redis_url, _ = start_stack(env, data_dir, port)
        report["loadavg_before"] = loadavg()
        asyncio.run(soak(args, env, data_dir, url, redis_url, report))
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        import traceback

        traceback.print_exc()
        if not isinstance(exc, Exception):
            raise
    finally:
        stop_stack(env)
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
        report["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        out = args.out / f"soak-{stamp}.json"
        out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print_table(report)
        print(f"results: {out}")
    return 1 if failures(report) else 0


if __name__ == "__main__":
    sys.exit(main())
