"""`lb demo`: the whole system on embedded defaults, then the page to look at.

Starts a fresh local stack in ``$LB_DATA_DIR/demo``, plays a synthetic season through
the real signed ingest API (redeliveries, corrections up and down, many ties) while
Spark starts, publishes a generation with Spark + Delta, shows the top 10 and one
player's rank in every read mode with their labels, then prints the page's URL and
keeps serving (with a trickle of new events, so the page's live refresh shows
something) until Ctrl-C, or stops at once with ``--exit``.

Spark's console output goes to ``$LB_DATA_DIR/demo/logs/spark.log``.
"""

from __future__ import annotations

import asyncio
import copy
import os
import random
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import yaml
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from api.security import sign
from conf.boards import load_boards
from conf.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BATCH = 1000
CONNECTIONS = 4
RETRIES = 10
# Events per second sent while the demo waits for Ctrl-C.
TRICKLE_PER_SECOND = 20
FALLBACK_BOARD = "alltime:all:global"
DEMO_PARTITIONS = 2


def synthetic_events(
    players: int,
    events: int,
    seed: int = 4,
    start: datetime | None = None,
    first_match: int = 0,
) -> Iterator[dict[str, Any]]:
    """A reproducible season: ~3% redeliveries, ~2% corrections (half of them
    downward), points on a coarse scale so that many players tie.

    Events occur between ``start`` and ten minutes ago, within the last 29 days (an
    older ``occurredAt`` would be outside the dedupe window and refused).
    """
    rng = random.Random(seed)
    now = datetime.now(UTC)
    oldest = now - timedelta(days=29)
    begin = max(start, oldest) if start else oldest
    span = max(60.0, (now - begin).total_seconds() - 600)
    recent: list[dict[str, Any]] = []
    sent = 0
    match = first_match
    while sent < events:
        roll = rng.random()
        if recent and roll < 0.03:
            yield rng.choice(recent)  # the same event again: a redelivery
        elif recent and roll < 0.05:
            slot = rng.randrange(len(recent))
            original = recent[slot]
            points = max(
                0, original["result"]["points"] + rng.choice((-20, -10, 10, 20))
            )
            revision = original["sourceRevision"] + 1
            correction = {
                **original,
                "eventId": f"{original['matchId']}-r{revision}",
                "sourceRevision": revision,
                "result": {"points": points},
                "kind": "correction",
                "reason": "score review",
            }
            # The correction replaces the match's latest event, so the next one for
            # this match builds on it (and never reuses an eventId).
            recent[slot] = correction
            yield correction
        else:
            match += 1
            player = rng.randrange(players)
            occurred = begin + timedelta(seconds=rng.uniform(0, span))
            event = {
                "eventId": f"E{match}",
                "playerId": f"P{player:06d}",
                "matchId": f"M{match}",
                "sourceRevision": 1,
                "occurredAt": occurred.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "region": "eu" if player % 2 == 0 else "na",
                "result": {"points": rng.randrange(0, 100, 10)},
                "kind": "result",
                "reason": None,
            }
            recent.append(event)
            if len(recent) > 5000:
                recent.pop(rng.randrange(len(recent)))
            yield event
        sent += 1


def signed_batch(
    secret: bytes, key_id: str, batch: list[dict[str, Any]]
) -> dict[str, Any]:
    """The httpx keyword arguments of a signed batch POST."""
    body = orjson.dumps({"events": batch})
    return {
        "content": body,
        "headers": {
            "X-Key-Id": key_id,
            "X-Signature": sign(secret, body),
            "Content-Type": "application/json",
        },
    }


async def _post_until_known(
    client: httpx.AsyncClient,
    url: str,
    secret: bytes,
    key_id: str,
    batch: list[dict[str, Any]],
) -> httpx.Response:
    """POST a batch; on 503 (outcome unknown) redeliver it, which the contract says
    is always safe: the same events return their saved results."""
    delay = 0.2
    for _ in range(RETRIES):
        reply = await client.post(
            f"{url}/v1/score-events:batch", **signed_batch(secret, key_id, batch)
        )
        if reply.status_code != 503:
            break
        await asyncio.sleep(delay)
        delay = min(5.0, delay * 2)
    reply.raise_for_status()
    return reply


async def _ingest(
    url: str,
    secret: bytes,
    key_id: str,
    events: Iterator[dict[str, Any]],
    on_batch: Any = None,
) -> dict[str, int]:
    """Send ``events`` in signed batches over a few connections; count statuses."""
    statuses: dict[str, int] = {}
    lock = asyncio.Lock()

    async def worker(client: httpx.AsyncClient) -> None:
        while True:
            async with lock:
                batch = [e for _, e in zip(range(BATCH), events, strict=False)]
            if not batch:
                return
            reply = await _post_until_known(client, url, secret, key_id, batch)
            for result in reply.json()["results"]:
                key = result.get("status") or result.get("error") or "?"
                statuses[key] = statuses.get(key, 0) + 1
            if on_batch is not None:
                on_batch(len(batch))

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(worker(client) for _ in range(CONNECTIONS)))
    return statuses


DEMO_SEASON = "DEMO"


def demo_boards(now: datetime) -> str:
    """The packaged default boards, plus a season open now when none of the
    default's seasons stays open for another day: the demo shows a season board on
    any date (the default's S4 ends on 2026-12-01)."""
    from importlib import resources

    raw = yaml.safe_load(resources.files("conf").joinpath("boards.yaml").read_text())
    config = load_boards(None)
    tomorrow = now + timedelta(days=1)
    if not any(
        s.start <= now - timedelta(hours=1) and tomorrow < s.end for s in config.seasons
    ):
        template = copy.deepcopy(raw["seasons"][0]) if raw.get("seasons") else {}
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        raw.setdefault("seasons", []).append(
            {
                **template,
                "id": DEMO_SEASON,
                # Events are dated up to 29 days back (the dedupe window is 30).
                "start": (day - timedelta(days=29)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "end": (day + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    return str(yaml.safe_dump(raw, sort_keys=False))


def _show_board(settings: Settings) -> tuple[str, datetime | None]:
    """The board the demo shows: the global board of a season open now, else
    all-time (the default season may have ended by the time someone runs this)."""
    now = datetime.now(UTC)
    for season in load_boards(settings.boards_file).seasons:
        if season.start <= now - timedelta(hours=1) and now < season.end:
            return f"season:{season.id}:global", season.start
    return FALLBACK_BOARD, None


def describe(body: dict[str, Any]) -> str:
    """A read's labels in words: what it is and what it is as of."""
    generation = (body.get("generation") or {}).get("id")
    if body["exactness"] == "exact" and body["basis"] == "live":
        what = f"exact, live: generation {generation} + every event since"
    elif body["exactness"] == "exact":
        what = f"exact, snapshot of generation {generation}"
    else:
        what = f"approximate (±{body['errorBound']:,} ranks), from the histogram"
    return f"{what}; {body['population']:,} players"


def _warm_up(spark: SparkSession, path: Path) -> None:
    """A tiny Delta write and read: the JVM's first Delta commit, query planning and
    code generation are slow, and here they overlap the ingest instead of the
    publish."""
    from pyspark.sql import functions as F

    frame = spark.range(64).withColumn("partition", F.col("id") % 2)
    frame.write.format("delta").mode("overwrite").partitionBy("partition").save(
        str(path)
    )
    spark.read.format("delta").load(str(path)).groupBy("partition").count().collect()
    shutil.rmtree(path, ignore_errors=True)


def _spark_in_background(settings: Settings, box: dict[str, Any]) -> threading.Thread:
    """Start Spark (its output to the log file) while the events are ingested."""
    from cli.quiet import quiet_spark

    def start() -> None:
        try:
            spark = quiet_spark(settings, "lb-demo")
            _warm_up(spark, settings.data_dir / "warm-up")
            box["spark"] = spark
        except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread
            box["error"] = exc

    thread = threading.Thread(target=start, name="spark-start", daemon=True)
    thread.start()
    return thread


def run_demo(
    settings: Settings,
    players: int = 10_000,
    events: int = 50_000,
    port: int | None = None,
    keep_running: bool = False,
) -> int:
    from cli.quiet import spark_log_path
    from cli.stack import down, up
    from jobs.publish import run_publish
    from speed.rebase import rebase_published
    from speed.server import free_port

    # The demo plays in its own data dir, fresh each run so that it is reproducible,
    # and its players submit many matches each: the per-player limit is off.
    data_dir = settings.data_dir / "demo"
    shutil.rmtree(data_dir, ignore_errors=True)
    settings = settings.model_copy(
        update={"rate_limit": "off", "data_dir": data_dir, "demo": True}
    )
    if "LB_PARTITIONS" not in os.environ:
        # Publishing lands each partition's log in a Delta commit of its own, whose
        # fixed cost dominates a demo-sized publish; the demo's events fit in two.
        settings = settings.model_copy(update={"partitions": DEMO_PARTITIONS})
        os.environ["LB_PARTITIONS"] = str(DEMO_PARTITIONS)  # inherited by the API
    os.environ["LB_RATE_LIMIT"] = "off"  # inherited by the API process
    os.environ["LB_DEMO"] = "true"  # the dev key is expected here: no warning
    os.environ["LB_DATA_DIR"] = str(data_dir.resolve())
    if settings.boards_file is None:
        # The embedded defaults, with a season open today whatever the date.
        data_dir.mkdir(parents=True, exist_ok=True)
        boards_file = (data_dir / "boards.yaml").resolve()
        boards_file.write_text(demo_boards(datetime.now(UTC)))
        settings = settings.model_copy(update={"boards_file": boards_file})
        os.environ["LB_BOARDS_FILE"] = str(boards_file)  # inherited by the API
    console = Console(highlight=False)
    board, season_start = _show_board(settings)
    console.rule("[bold]Leaderboard demo")
    console.print(
        f"{players:,} players, {events:,} score events, then one published "
        f"generation.\nData in [cyan]{data_dir}[/]; Spark's log in "
        f"[cyan]{spark_log_path(settings)}[/]."
    )
    timings: dict[str, float] = {}
    box: dict[str, Any] = {}
    url = ""
    stopped = False
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    try:
        with progress:
            step = progress.add_task("Starting Redis and the API", total=1)
            t = time.perf_counter()
            url = up(settings, port or free_port())
            timings["start Redis + API"] = time.perf_counter() - t
            progress.update(step, completed=1)

            spark_task = progress.add_task("Starting Spark (meanwhile)", total=1)
            spark_started = time.perf_counter()
            spark_thread = _spark_in_background(settings, box)

            ingest = progress.add_task("Ingesting signed score events", total=events)
            key_id, secret = next(iter(settings.signing_keys.items()))
            t = time.perf_counter()
            statuses = asyncio.run(
                _ingest(
                    url,
                    secret,
                    key_id,
                    synthetic_events(players, events, start=season_start),
                    on_batch=lambda n: progress.advance(ingest, n),
                )
            )
            timings["ingest"] = time.perf_counter() - t

            spark_thread.join()
            if "error" in box:
                raise box["error"]
            timings["start Spark (overlapped)"] = time.perf_counter() - spark_started
            progress.update(spark_task, completed=1)
            spark: SparkSession = box["spark"]

            publish = progress.add_task("Publishing a generation (Spark)", total=2)
            t = time.perf_counter()
            phases: dict[str, float] = {}
            generation = run_publish(settings, spark=spark, timings=phases)
            timings["publish (land, recompute, rank)"] = time.perf_counter() - t
            timings.update({f"  publish: {k}": v for k, v in phases.items()})
            progress.advance(publish)
            t = time.perf_counter()
            rebase_published(settings, generation)
            timings["rebase the speed layer"] = time.perf_counter() - t
            progress.advance(publish)

        accepted = statuses.get("accepted", 0)
        others = ", ".join(
            f"{n:,} {s}" for s, n in sorted(statuses.items()) if s != "accepted"
        )
        console.print(
            f"Ingest: {accepted:,} accepted ({others}) at "
            f"{events / timings['ingest']:,.0f} events/s. Published [bold]{generation}"
            "[/]."
        )
        player = _show_reads(console, url, board, timings)
        _show_timings(console, timings)
        page = f"{url}/#board={board}&player={player}"
        # soft_wrap: a URL must stay on one line to be clickable and copyable.
        console.print(
            f"\n[bold green]Open the page:[/] [link={page}]{page}[/link]",
            soft_wrap=True,
        )
        console.print(f"API docs: {url}/docs", soft_wrap=True)
        if keep_running:
            console.print(
                f"Serving, with about {TRICKLE_PER_SECOND} new events a second so the "
                "page's live view moves. [bold]Press Ctrl-C to stop.[/]"
            )
            _trickle_until_interrupted(url, secret, key_id, players)
    except KeyboardInterrupt:
        stopped = True
    finally:
        if url:
            down(settings)
        if stopped or keep_running:
            console.print("Stopped the demo stack.")
    return 0


def _show_reads(
    console: Console, url: str, board: str, timings: dict[str, float]
) -> str:
    """Print the top 10 and one tied player's rank in every mode; return the player."""
    t = time.perf_counter()
    top = httpx.get(f"{url}/v1/boards/{board}/top", params={"limit": 10}).json()
    timings["read top 10 (live)"] = time.perf_counter() - t
    table = Table(title=f"Top 10 of {board}", caption=describe(top))
    for column in ("#", "rank", "player", "score"):
        table.add_column(column, justify="left" if column == "player" else "right")
    entries = top["entries"]
    ranks = [e["rank"] for e in entries]
    for entry in entries:
        shared = ranks.count(entry["rank"]) > 1 or entry["rank"] < entry["position"]
        tie = "=" if shared else ""
        table.add_row(
            str(entry["position"]),
            f"{entry['rank']}{tie}",
            entry["playerId"],
            f"{entry['score']:,}",
        )
    console.print(table)
    player = entries[len(entries) // 2]["playerId"] if entries else "P000001"
    reads = Table(title=f"{player} in every read mode")
    for column in ("mode", "score", "rank", "top %", "what it is", "read in"):
        reads.add_column(column, justify="left" if column == "what it is" else "right")
    for mode in ("live", "snapshot", "approx"):
        t = time.perf_counter()
        reply = httpx.get(
            f"{url}/v1/boards/{board}/players/{player}", params={"mode": mode}
        )
        elapsed = time.perf_counter() - t
        timings[f"read rank ({mode})"] = elapsed
        body = reply.json()
        if reply.status_code != 200:
            error = f"{reply.status_code} {body.get('error')}"
            reads.add_row(mode, "", "", "", error, "")
            continue
        reads.add_row(
            mode,
            f"{body['score']:,}",
            f"{body['rank']:,}",
            f"{body['topPercent']:.2f}",
            describe(body),
            f"{elapsed * 1000:.1f} ms",
        )
    console.print(reads)
    return str(player)


def _show_timings(console: Console, timings: dict[str, float]) -> None:
    table = Table(title="Timings")
    table.add_column("step")
    table.add_column("seconds", justify="right")
    for step, seconds in timings.items():
        table.add_row(step, f"{seconds:.3f}" if seconds < 1 else f"{seconds:.1f}")
    console.print(table)


def _trickle_until_interrupted(
    url: str, secret: bytes, key_id: str, players: int
) -> None:
    """New matches at a slow pace until Ctrl-C (which ends the demo)."""
    events = synthetic_events(
        players,
        10**12,
        seed=int(time.time()),
        start=datetime.now(UTC) - timedelta(minutes=30),
        first_match=10**9,
    )
    with httpx.Client(timeout=30) as client:
        while True:
            batch = [e for _, e in zip(range(TRICKLE_PER_SECOND), events, strict=False)]
            try:
                client.post(
                    f"{url}/v1/score-events:batch",
                    **signed_batch(secret, key_id, batch),
                )
            except httpx.HTTPError:
                pass  # the page keeps working; the next second tries again
            time.sleep(1)
