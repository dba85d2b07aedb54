"""Read benchmark: snapshot, live and approximate reads of a large board, measured from
outside on loopback against the real stack (`lb up`).

    python -m bench.reads [--players N] [--extra-events M] [--rate R] [--seconds S]
                          [--sample K] [--closed-seconds S] [--closed-connections C]
                          [--profile] [--keep-data] [--out DIR]
                          [--publish direct --layers K [--layer-events L]
                           [--compare-compacted]]

Set-up (not timed as reads):

1. `lb up --port <free port>` in a fresh temporary LB_DATA_DIR (LB_RATE_LIMIT=off,
   otherwise the defaults: local Redis, 8 partitions, default boards); always `lb down`.
2. N players, one event each, applied straight through ``speed.store.SpeedLayer.apply``
   (redis.asyncio, batches of 1000, bypassing HTTP). Points on a coarse scale (multiples
   of ``--points-step``), so there are many ties. Every event has the same occurredAt
   (ten minutes before the bench started, in the season ``bench.harness`` opens
   around now), region eu for even and na for odd players, so it feeds the same 10
   boards; ``season:BENCH:global`` holds all N players.
   During the bulk load only, Redis runs with ``appendfsync everysec`` (restored to the
   stack's setting before anything is measured); reads never fsync.
3. Publish a generation exactly as `lb publish` does (``jobs.publish.run_publish`` then
   ``speed.rebase.rebase_published``), in a child process so the Spark JVM is gone
   before reads are measured; both are timed (the publish-time data point for N).
   ``--layers K`` (with ``--publish direct``): then K generations g2..g<K+1>, each
   after one event for each of L distinct players (``--layer-events``; default the
   players x LB_LAYERS_MAX_FRACTION's default / K, the longest chain the publisher
   keeps before it compacts) applied through the speed layer, each published as
   one layer per board over its parent (serving/layers.py's ``write_board_layer``,
   the parent's base and layers hard-linked, the manifest entry the Spark
   publisher writes) and rebased: the reads are of a board with a chain of K
   layers (issue 24's target: p99 within 10 % of a compacted generation).
4. M more events for M distinct existing players (so changed-sets hold ~M players).

The bench keeps every player's generation and live total itself, so every answer it
gets is checked against an offline sort (score, competition rank, top-100 order).

Measured (open loop at a fixed offered rate, latency from each request's scheduled
send time; a lean client of asyncio protocols on keep-alive connections, the same
2 cores, `--client aiohttp` for the client used until session 16):

1. snapshot top?limit=100, rank, nearby?radius=5; closed-loop max rate of snapshot top;
2. live rank, top?limit=100, nearby?radius=5; live rank and top-100 with ?ranking=dense;
3. approximate rank (mode=approx);
4. Redis bytes per changed player per board (chz + chb), fw/bk/tot bytes, and a full
   sorted set of the same board built in the same Redis for comparison;
5. approximate error vs exact live rank on a sample, and errorBound violations;
6. serving-segment bytes per player.

``--compare-compacted`` (with ``--layers``): after the phases above on the layered
generation, the same totals are published as one full generation (direct, at the
layered one's boundary: no new events, the M changes stay live) and rebased, and
the same phases run again against the same truths; the report prints both p99s and
the API's CPU per request side by side with their ratios. History and diff (which
model two generations, g1 and a g2 of the live totals) are not run with
``--layers``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, deque
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import redis

from bench.harness import (
    BENCH_SEASON,
    CpuMeter,
    GcPauses,
    free_port,
    loadavg,
    percentile,
    redis_command_delta,
    redis_command_usec,
    redis_forks,
    report_head,
    stack_env,
    start_stack,
    stop_stack,
    summarize_ms,
    top_processes,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# Recent, so every board it names is open (a daily board closes an hour after its
# day); `lb up` gets bench.harness' boards file, whose season is open around now.
OCCURRED_AT = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
BOARD = f"season:{BENCH_SEASON}:global"
REGIONS = ("eu", "na")


# Digits of a player id: 7 up to 10 M players, more for a bigger board (``main``
# widens it before anything is named).
ID_DIGITS = 7


def player_id(i: int) -> str:
    return f"p{i:0{ID_DIGITS}d}"  # zero-padded: byte order of ids = numeric order


def player_id_array(n: int) -> Any:
    """``player_id(i)`` for i in 0..n-1 as one Arrow string array, built from
    digit columns (a Python string per player would take minutes and gigabytes
    at the seeds' 100 M)."""
    import pyarrow as pa

    width = ID_DIGITS + 1
    data = np.empty((n, width), np.uint8)
    data[:, 0] = ord("p")
    rest = np.arange(n, dtype=np.int64)
    for k in range(width - 1, 0, -1):
        data[:, k] = 48 + rest % 10
        rest //= 10
    # Arrow's utf8 has 32-bit offsets: 2 GiB of ids, about 200 M players.
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(data.reshape(-1))
    )


# --------------------------------------------------------------------------- set-up


def make_raw(i: int, tag: str, n: int, points: int) -> dict[str, Any]:
    return {
        "eventId": f"{tag}-e{n}",
        "playerId": player_id(i),
        "matchId": f"{tag}-m{n}",
        "sourceRevision": 1,
        "occurredAt": OCCURRED_AT,
        "region": REGIONS[i % 2],
        "result": {"points": points},
        "kind": "result",
        "reason": None,
    }


async def apply_events(
    redis_url: str, items: list[tuple[int, int]], tag: str, lanes: int = 2
) -> dict[str, Any]:
    """Apply (player index, points) events through SpeedLayer.apply, batches of 1000."""
    import redis.asyncio as aioredis

    from conf.boards import load_boards
    from conf.settings import Settings
    from serving.registry import GenerationRegistry
    from speed.baserows import registry_lookup
    from speed.events import validate_event
    from speed.store import SpeedLayer

    settings = Settings()
    boards = load_boards(settings.boards_file)
    # Long timeouts: on a loaded machine a bulk batch can stall Redis for seconds.
    client = aioredis.from_url(
        redis_url, max_connections=lanes + 2, socket_timeout=300, retry_on_timeout=True
    )
    speed = SpeedLayer(
        client, boards, settings.partitions, settings.retention_seconds, None
    )
    # Writes after a rebase name players' rows in the base generation.
    speed.base_generations = registry_lookup(
        GenerationRegistry(settings.segments_dir, settings.retained_generations)
    )
    now = datetime.now(UTC)
    batches = [items[k : k + 1000] for k in range(0, len(items), 1000)]
    statuses: Counter[str] = Counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for k in range(len(batches)):
        queue.put_nowait(k)
    t0 = time.perf_counter()

    async def lane() -> None:
        while not queue.empty():
            k = queue.get_nowait()
            events = [
                validate_event(
                    make_raw(i, tag, k * 1000 + j, pts),
                    settings,
                    boards,
                    now,
                    speed.rules,
                )
                for j, (i, pts) in enumerate(batches[k])
            ]
            for outcome in await speed.apply(events):
                if outcome.body is None:
                    statuses[f"error:{type(outcome.error).__name__}"] += 1
                else:
                    statuses[outcome.body["status"]] += 1

    try:
        await asyncio.gather(*(lane() for _ in range(lanes)))
    finally:
        await client.aclose()
    elapsed = time.perf_counter() - t0
    return {
        "events": len(items),
        "seconds": round(elapsed, 1),
        "events_per_s": round(len(items) / elapsed),
        "statuses": dict(statuses),
    }


def publish_child() -> None:
    """Run in a child process: publish + rebase, print timings as JSON."""
    from conf.settings import Settings
    from jobs.publish import run_publish
    from speed.rebase import rebase_published

    settings = Settings()
    t0 = time.perf_counter()
    generation = run_publish(settings)
    t1 = time.perf_counter()
    report = rebase_published(settings, generation)
    t2 = time.perf_counter()
    print(
        "PUBLISH-RESULT "
        + json.dumps(
            {
                "generation": generation,
                "run_publish_s": round(t1 - t0, 1),
                "rebase_s": round(t2 - t1, 1),
                "rebase": {str(k): v for k, v in report.partitions.items()},
            }
        ),
        flush=True,
    )


def publish_spark() -> dict[str, Any]:
    """`lb publish` (run_publish + rebase_published) in a child process, so the
    Spark JVM has exited before reads are measured."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.reads", "--publish-child"],
        cwd=str(Path(__file__).resolve().parent.parent),
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - t0
    line = next(
        (x for x in proc.stdout.splitlines() if x.startswith("PUBLISH-RESULT ")), None
    )
    if proc.returncode != 0 or line is None:
        raise RuntimeError(
            f"publish failed: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )
    publish: dict[str, Any] = json.loads(line.split(" ", 1)[1])
    publish["publish"] = "spark"
    publish["child_wall_s"] = round(wall, 1)
    return publish


def publish_direct(
    redis_url: str,
    points: np.ndarray,
    number: int = 1,
    versions: bool = True,
    *,
    boundary: dict[int, int] | None = None,
    chain: DirectChain | None = None,
) -> dict[str, Any]:
    """Publish generation g<number> straight from the bench's own totals, in the serving
    format (``serving.segments.write_segments`` + ``build_manifest``: the files the
    Spark publisher writes for the same rows), then rebase as `lb publish` does.

    For read measurements only: the read path maps the same files either way, and
    this takes seconds where the Spark publish of 1 M players takes minutes. The
    boards are the ones the bulk load fed (found from the speed layer's keys);
    every player had one event, so a board's total is the player's points (g2,
    for the history and diff reads: the live totals, without the version column,
    ``versions=False``: the pairs' versions then differ).

    ``chain`` (``--layers``): the pairs' versions are ``chain.versions`` when set
    (pairs changed since g1 differ), and the boards' entries are kept in it for the
    layers that follow; ``boundary``: the generation's boundary instead of the
    partitions' positions (the compacted generation of ``--compare-compacted``
    has the layered one's, so the events applied since stay live changes)."""
    import pyarrow as pa

    from conf.boards import board_order, load_boards
    from conf.settings import Settings
    from jobs.segments import DEFAULT_BUCKET_TARGET
    from serving.manifest import generation_id
    from serving.segments import write_segments
    from speed.partitions import Keys

    settings = Settings()
    config = load_boards(settings.boards_file)
    client = redis.Redis.from_url(redis_url)
    t0 = time.perf_counter()
    if boundary is None:
        boundary = {
            p: int(client.get(Keys(p).position) or 0)
            for p in range(settings.partitions)
        }
    # The previous generation's boards when the chain has one (after a rebase the
    # speed layer holds change keys only of boards with changes since).
    boards: set[str] = set(chain.entries) if chain is not None else set()
    for p in range(settings.partitions if not boards else 0):
        prefix = f"{Keys(p).base}:chz:"
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            boards.add(key.decode()[len(prefix) :])
    n = len(points)
    ids = np.array([player_id(i) for i in range(n)], dtype=object)
    order = np.lexsort((np.arange(n), -points))  # score desc, id asc (= index asc)
    in_region = {region: order[order % 2 == k] for k, region in enumerate(REGIONS)}
    names, players, scores, board_rows = [], [], [], []
    for board in sorted(boards):
        scope = board.rsplit(":", 1)[1]
        rows = order if scope not in REGIONS else in_region[scope]
        names.append(np.full(len(rows), board, dtype=object))
        players.append(ids[rows])
        scores.append(points[rows])
        board_rows.append(rows)
    rows_total = sum(len(b) for b in names)
    columns = {
        "board": pa.array(np.concatenate(names), pa.string()),
        "player_id": pa.array(np.concatenate(players), pa.string()),
        "score": pa.array(np.concatenate(scores), pa.int64()),
    }
    if versions and chain is not None and chain.versions is not None:
        # Every player's version, the same on each of its boards (read_versions).
        columns["version"] = pa.array(
            np.concatenate([chain.versions[rows] for rows in board_rows]), pa.int64()
        )
    elif versions:
        version = boundary_version(client, settings.partitions, sorted(boards), n)
        # As the production writer (jobs/versions.py): each pair's version at
        # the boundary, so the rebase drops the totals of unchanged players
        # (issue 11, only deltas in Redis) and the memory line is issue 11's.
        columns["version"] = pa.array(np.full(rows_total, version), pa.int64())
        if chain is not None:
            chain.versions = np.full(n, version, dtype=np.int64)
    table = pa.table(columns)
    generation = generation_id(number)
    directory = settings.segments_dir / generation
    directory.mkdir(parents=True)
    orders = {b: board_order(config, b) for b in boards}
    files = write_segments(table, directory, DEFAULT_BUCKET_TARGET, orders)
    if chain is not None:
        chain.entries = files
    return _finish_direct(client, settings, generation, number, boundary, files, t0)


def publish_base_direct(redis_url: str, points: np.ndarray) -> dict[str, Any]:
    """``--base direct``: generation g1 holds ``BOARD`` alone, one row per player
    with ``points`` as its total, written in the serving format with no event in
    the log (boundary 0 on every partition, every pair at version 0: a pair the log
    never named), then the rebase onto it. What the seeds' scale needs (issue 24:
    one board of 100 M players): the speed layer could not take 100 M set-up events
    on this machine, and the read path maps the same files either way."""
    import pyarrow as pa

    from conf.settings import Settings
    from jobs.segments import DEFAULT_BUCKET_TARGET
    from serving.segments import board_entry, write_board_segment

    settings = Settings()
    client = redis.Redis.from_url(redis_url)
    t0 = time.perf_counter()
    n = len(points)
    # Display order: score descending, then id ascending (= index ascending).
    order = np.argsort(-points, kind="stable")
    players = player_id_array(n).take(pa.array(order))
    directory = settings.segments_dir / "g1"
    directory.mkdir(parents=True)
    t_sorted = time.perf_counter()
    sums = write_board_segment(
        directory,
        BOARD,
        players,
        pa.array(points[order], pa.int64()),
        DEFAULT_BUCKET_TARGET,
        versions=pa.array(np.zeros(n, np.int64)),
    )
    del players, order
    files = {BOARD: board_entry(BOARD, n, sums)}
    boundary = dict.fromkeys(range(settings.partitions), 0)
    report = _finish_direct(client, settings, "g1", 1, boundary, files, t0)
    report["sort_s"] = round(t_sorted - t0, 1)
    report["base_players"] = n
    return report


def _finish_direct(
    client: redis.Redis,
    settings: Any,
    generation: str,
    number: int,
    boundary: dict[int, int],
    files: dict[str, dict[str, Any]],
    t0: float,
) -> dict[str, Any]:
    """The rest of a direct publish once the boards' files are written: the
    contributions index, ``manifest.json`` last, the log landed, the rebase."""
    from serving.contributions import write_index
    from serving.manifest import MANIFEST_FILE, build_manifest
    from speed.partitions import Keys
    from speed.rebase import rebase_published

    directory = settings.segments_dir / generation
    # The contributions index, as the Spark publisher writes it: the items the
    # log records since the last boundary applied, layered over g<number - 1>'s.
    t_index = time.perf_counter()
    parent_dir = settings.segments_dir / f"g{number - 1}"
    parent = (
        (parent_dir, json.loads((parent_dir / MANIFEST_FILE).read_text()))
        if number > 1 and (parent_dir / MANIFEST_FILE).exists()
        else None
    )
    contributions = write_index(
        directory, generation, log_items(client, boundary), parent
    )
    index_s = time.perf_counter() - t_index
    manifest = build_manifest(
        generation, datetime.now(UTC), boundary, files, contributions=contributions
    )
    (directory / MANIFEST_FILE).write_text(manifest)
    # What landing leaves behind: the log is in Delta up to the boundary.
    for p, position in boundary.items():
        client.set(Keys(p).landed, position)
        client.xtrim(Keys(p).log, minid=f"{position + 1}-0")
    t1 = time.perf_counter()
    report = rebase_published(settings, generation)
    t2 = time.perf_counter()
    client.close()
    return {
        "generation": generation,
        "publish": "direct",
        "write_segments_s": round(t1 - t0, 1),
        "contributions_index_s": round(index_s, 1),
        "contributions": contributions["rows"],
        "rebase_s": round(t2 - t1, 1),
        "rebase": {str(k): v for k, v in report.partitions.items()},
    }


class DirectChain:
    """What the direct path carries from one generation to the next (``--layers``):
    every player's version (the same on each of its boards) and the last
    generation's board entries with their files' checksums (which the Spark
    publisher keeps in the gold manifest row, not in ``manifest.json``)."""

    def __init__(self) -> None:
        self.versions: np.ndarray | None = None
        self.entries: dict[str, dict[str, Any]] = {}


def read_versions(
    client: redis.Redis,
    partitions: int,
    boards: list[str],
    changed: np.ndarray,
    points: np.ndarray,
) -> np.ndarray:
    """The (total, version) the speed layer holds for each changed player on each
    of its boards ("total|version" in the totals hashes), checked against the
    bench's own totals; returns the versions, which must agree across boards."""
    from speed.partitions import Keys, partition_of

    pipe = client.pipeline(transaction=False)
    asked: list[tuple[int, str]] = []
    for i in changed.tolist():
        pid = player_id(i)
        key_of = Keys(partition_of(pid, partitions))
        for board in boards:
            if board_holds(board, i):
                pipe.hget(key_of.totals(board), pid)
                asked.append((i, board))
    seen: dict[int, int] = {}
    for (i, board), raw in zip(asked, pipe.execute(), strict=True):
        if raw is None:
            raise RuntimeError(f"no total for {player_id(i)} on {board}")
        total, version = (int(x) for x in bytes(raw).split(b"|")[:2])
        if total != int(points[i]) or seen.setdefault(i, version) != version:
            raise RuntimeError(
                f"{player_id(i)} on {board}: total|version {total}|{version}, "
                f"want {int(points[i])} (version {seen[i]})"
            )
    return np.array([seen[i] for i in changed.tolist()], dtype=np.int64)


def board_holds(board: str, i: int) -> bool:
    """Whether player i is on the board (the region boards hold their region's)."""
    scope = board.rsplit(":", 1)[1]
    return scope not in REGIONS or REGIONS[i % 2] == scope


def publish_layer(
    redis_url: str,
    number: int,
    chain: DirectChain,
    changed: np.ndarray,
    points: np.ndarray,
) -> dict[str, Any]:
    """Publish g<number> as one layer per board over g<number - 1> (serving/layers.py)
    from the bench's totals, as the Spark publisher writes a layered generation
    (``write_layer_over``): the parent's base and layer files hard-linked into the
    new directory, a layer of the changed players' new rows (with their pairs'
    versions) replacing their parent rows, and the same manifest entry ("base",
    "basePopulation", "layers" oldest first); then the contributions index,
    ``manifest.json``, landing and the rebase as :func:`publish_direct`.

    Only the changed rows are sorted and written (the bench knows them; the
    publisher finds them by comparing the board's new rows with the parent's).
    ``points``: every player's total at this generation; ``chain.versions``
    already holds the changed pairs' versions."""
    from conf.settings import Settings
    from serving.layers import base_population, chain_files, write_board_layer
    from serving.manifest import generation_id
    from speed.partitions import Keys

    assert chain.versions is not None
    settings = Settings()
    client = redis.Redis.from_url(redis_url)
    t0 = time.perf_counter()
    boundary = {
        p: int(client.get(Keys(p).position) or 0) for p in range(settings.partitions)
    }
    generation = generation_id(number)
    parent_dir = settings.segments_dir / generation_id(number - 1)
    directory = settings.segments_dir / generation
    directory.mkdir(parents=True)
    files: dict[str, dict[str, Any]] = {}
    layer_rows = 0
    for board, meta in sorted(chain.entries.items()):
        sums: dict[str, str] = {}
        for name in chain_files(meta):
            os.link(parent_dir / name, directory / name)
            sums[name] = meta["checksums"][name]
        rows = [i for i in changed.tolist() if board_holds(board, i)]
        if not rows:  # untouched: linked as jobs/incremental.link_board links it
            files[board] = {**meta, "checksums": sums}
            continue
        layer = write_board_layer(
            directory,
            board,
            generation,
            (
                (player_id(i), int(points[i]), None, int(chain.versions[i]))
                for i in rows
            ),
            [player_id(i) for i in rows],
        )
        layer_rows += layer["rows"]
        sums.update(layer.pop("checksums"))
        entry: dict[str, Any] = {
            k: meta[k]
            for k in ("file", "index", "buckets", "sha256", "tieBreak", "rank")
            if k in meta
        }
        entry["population"] = meta["population"]  # every changed player was on it
        entry["base"] = meta.get("base", parent_dir.name)
        entry["basePopulation"] = base_population(meta)
        entry["layers"] = [*meta.get("layers", ()), layer]
        entry["checksums"] = sums
        files[board] = entry
    chain.entries = files
    result = _finish_direct(client, settings, generation, number, boundary, files, t0)
    result["publish"] = "direct-layer"
    result["layer_rows"] = layer_rows
    return result


def build_layers(
    args: argparse.Namespace,
    redis_url: str,
    points: np.ndarray,
    chain: DirectChain,
    steps: int,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """``--layers K``: K generations g2..g<K+1>, each after one event for each of a
    slice of distinct players (applied through the speed layer, as the extra
    events) and published as one layer per board over its parent, then rebased.
    Returns every player's total at the last one and each step's report."""
    from conf.settings import Settings

    settings = Settings()
    n, k = len(points), args.layers
    # Default: LB_LAYERS_MAX_FRACTION's share of the players over K layers, the
    # longest chain of that many the publisher keeps before it compacts.
    fraction = Settings.model_fields["layers_max_fraction"].default
    per = args.layer_events or int(n * fraction / k)
    per = max(1, min(per, n // k))
    # Its own random stream: the extra events are the ones of --layers 0.
    rng = random.Random(args.seed + 23)
    chosen = np.array(rng.sample(range(n), per * k), dtype=np.int64)
    points = points.copy()
    client = redis.Redis.from_url(redis_url)
    steps_report = []
    try:
        for step in range(k):
            changed = chosen[step * per : (step + 1) * per]
            extra = [(rng.randrange(steps) + 1) * args.points_step for _ in changed]
            print(
                f"set-up: layer {step + 1}/{k}: {per} events for {per} distinct "
                "players, publish (direct, one layer per board) + rebase ...",
                flush=True,
            )
            applied = asyncio.run(
                apply_events(
                    redis_url,
                    list(zip(changed.tolist(), extra, strict=True)),
                    f"layer{step + 1}",
                )
            )
            points[changed] += np.array(extra, dtype=np.int64)
            assert chain.versions is not None
            chain.versions[changed] = read_versions(
                client, settings.partitions, sorted(chain.entries), changed, points
            )
            publish = publish_layer(redis_url, step + 2, chain, changed, points)
            publish["events"] = {
                key: v
                for key, v in applied.items()
                if key in ("statuses", "events_per_s")
            }
            print(f"  {publish}", flush=True)
            steps_report.append(publish)
    finally:
        client.close()
    return points, steps_report


def log_items(client: redis.Redis, boundary: dict[int, int]) -> Any:
    """The board items the log records after each partition's landed position and
    up to ``boundary`` applied (serving.contributions.record_contributions), as a
    table of its ``ITEM_SCHEMA``: what landing would have put in bronze."""
    import orjson
    import pyarrow as pa

    from serving.contributions import ITEM_SCHEMA, record_contributions
    from speed.partitions import Keys

    columns: dict[str, list[Any]] = {f.name: [] for f in ITEM_SCHEMA}
    for p, through in boundary.items():
        start = f"{int(client.get(Keys(p).landed) or 0) + 1}-0"
        while True:
            entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
                Keys(p).log, min=start, max=str(through), count=10_000
            )
            if not entries:
                break
            for entry_id, fields in entries:
                position = int(entry_id.decode().split("-", 1)[0])
                record = orjson.loads(fields[b"r"])
                player = (record.get("event") or {}).get("playerId")
                if player is None:
                    continue
                for item in record_contributions(record, player, p, position):
                    for name in columns:
                        columns[name].append(getattr(item, name))
            start = f"({entries[-1][0].decode()}"
    return pa.table(
        [pa.array(columns[f.name], f.type) for f in ITEM_SCHEMA], schema=ITEM_SCHEMA
    )


def boundary_version(
    client: redis.Redis, partitions: int, boards: list[str], n: int
) -> int:
    """The version every (board, player) pair has at the boundary. Every player
    had exactly one event by then, so all pairs share it: read from the totals
    hashes ("total|version") for a sample of players on every board, which must
    agree (else the bench's set-up is not what this assumes)."""
    from speed.partitions import Keys, partition_of

    seen: set[int] = set()
    for board in boards:
        for i in range(0, n, max(1, n // 50)):
            pid = player_id(i)
            raw = client.hget(Keys(partition_of(pid, partitions)).totals(board), pid)
            if raw is not None:
                seen.add(int(bytes(raw).split(b"|")[1]))  # type: ignore[arg-type]
    if len(seen) != 1:
        raise RuntimeError(f"pairs at the boundary have versions {sorted(seen)}")
    return seen.pop()


# --------------------------------------------------------------------------- truth


class Truth:
    """Offline sort of the totals the bench applied."""

    def __init__(self, totals: np.ndarray) -> None:
        self.totals = totals
        self.asc = np.sort(totals)
        self.n = len(totals)
        self.distinct = np.unique(totals)

    def rank(self, i: int) -> int:
        s = self.totals[i]
        return int(self.n - np.searchsorted(self.asc, s, side="right")) + 1

    def rank_of_score(self, s: int) -> int:
        return int(self.n - np.searchsorted(self.asc, s, side="right")) + 1

    def dense_rank(self, i: int) -> int:
        """Dense rank: 1 + distinct scores strictly higher (``?ranking=dense``)."""
        return self.dense_rank_of_score(int(self.totals[i]))

    def dense_rank_of_score(self, s: int) -> int:
        above = len(self.distinct) - np.searchsorted(self.distinct, s, side="right")
        return int(above) + 1

    def top_dense(self, k: int) -> list[tuple[int, str, int]]:
        """:meth:`top` with dense ranks (display order is the same)."""
        return [
            (self.dense_rank_of_score(score), player, score)
            for _, player, score in self.top(k)
        ]

    def top(self, k: int) -> list[tuple[int, str, int]]:
        """(rank, playerId, score) of the first k display positions."""
        threshold = self.asc[max(0, self.n - k)]
        cand = np.nonzero(self.totals >= threshold)[0]
        order = np.lexsort((cand, -self.totals[cand]))[:k]
        return [
            (
                self.rank(int(cand[o])),
                player_id(int(cand[o])),
                int(self.totals[cand[o]]),
            )
            for o in order
        ]


class Checker:
    def __init__(self) -> None:
        self.checked = 0
        self.bad: list[str] = []

    def fail(self, text: str) -> None:
        if len(self.bad) < 20:
            self.bad.append(text)

    def rank(self, body: dict[str, Any], i: int, truth: Truth, basis: str) -> None:
        self.checked += 1
        want_score = int(truth.totals[i])
        if body.get("score") != want_score or body.get("rank") != truth.rank(i):
            self.fail(
                f"{basis} rank {player_id(i)}: got score {body.get('score')} rank "
                f"{body.get('rank')}, want {want_score} / {truth.rank(i)}"
            )
        if body.get("basis") != basis or body.get("population") != truth.n:
            self.fail(
                f"{basis} rank {player_id(i)}: basis {body.get('basis')} "
                f"population {body.get('population')}"
            )

    def dense_rank(self, body: dict[str, Any], i: int, truth: Truth) -> None:
        """A live ``?ranking=dense`` player read against the offline sort."""
        self.checked += 1
        want = (int(truth.totals[i]), truth.dense_rank(i), "dense")
        got = (body.get("score"), body.get("rank"), body.get("ranking"))
        if got != want or body.get("basis") != "live":
            self.fail(f"live dense rank {player_id(i)}: got {got}, want {want}")

    def history(
        self,
        body: dict[str, Any],
        i: int,
        gens: tuple[str, str],
        truths: tuple[Truth, Truth],
    ) -> None:
        """A player's history over g1 and g2 (API.md "Why a rank changed"): newest
        first, each generation's score and rank, the step's rankChange with
        exact newlyAbove / noLongerAbove counts from the two offline sorts, and
        contributions whose deltas add up to the totals."""
        self.checked += 1
        old, new = truths
        entries = body.get("entries") or []
        got = [
            (e["generation"]["id"], e["score"], e["rank"], e["population"])
            for e in entries
        ]
        want = [
            (gens[1], int(new.totals[i]), new.rank(i), new.n),
            (gens[0], int(old.totals[i]), old.rank(i), old.n),
        ]
        if got != want or body.get("playerId") != player_id(i):
            self.fail(f"history {player_id(i)}: got {got}, want {want}")
            return
        above_new = new.totals > new.totals[i]
        above_old = old.totals > old.totals[i]
        change = {
            "from": old.rank(i),
            "to": new.rank(i),
            "ownScoreChange": int(new.totals[i] - old.totals[i]),
            "newlyAbove": int(np.count_nonzero(above_new & ~above_old)),
            "noLongerAbove": int(np.count_nonzero(above_old & ~above_new)),
        }
        if entries[0].get("rankChange") != change or entries[1].get("rankChange"):
            self.fail(
                f"history {player_id(i)}: rankChange {entries[0].get('rankChange')}, "
                f"want {change}"
            )
            return
        # The contributions (the generations' contributions index): g1, the first
        # listed, lists every event up to its boundary, g2 those after; their
        # deltas add up to each generation's total and to the step's change.
        sums = [sum(c["delta"] for c in e.get("changes") or []) for e in entries]
        want_sums = [change["ownScoreChange"], int(old.totals[i])]
        if sums != want_sums or not entries[1].get("changes"):
            self.fail(
                f"history {player_id(i)}: contributions add up to {sums}, "
                f"want {want_sums}"
            )

    def diff(self, body: dict[str, Any], want: dict[str, Any]) -> None:
        """The diff of g1 and g2 against the offline sorts (movers, counts)."""
        self.checked += 1
        got = {k: body.get(k) for k in want}
        if got != want:
            self.fail(f"diff: got counts {got.get('counts')}, want {want['counts']}")

    def top(
        self, body: dict[str, Any], want: list[tuple[int, str, int]], basis: str
    ) -> None:
        self.checked += 1
        got = [(e["rank"], e["playerId"], e["score"]) for e in body.get("entries", [])]
        if got != want or body.get("basis") != basis:
            pairs = zip(got, want, strict=False)
            first = next(((g, w) for g, w in pairs if g != w), None)
            self.fail(
                f"{basis} top differs (basis {body.get('basis')}): first mismatch "
                f"{first}, {len(got)} entries"
            )

    def nearby(
        self, body: dict[str, Any], i: int, truth: Truth, basis: str, radius: int
    ) -> None:
        self.checked += 1
        entries = body.get("entries", [])
        mine = [e for e in entries if e["playerId"] == player_id(i)]
        if not mine or mine[0]["rank"] != truth.rank(i):
            self.fail(
                f"{basis} nearby {player_id(i)}: center {mine[:1]}, "
                f"want rank {truth.rank(i)}"
            )
            return
        for e in entries:
            if e["rank"] != truth.rank_of_score(e["score"]):
                self.fail(f"{basis} nearby {player_id(i)}: {e} rank wrong")
                return
        # Fewer than 2 * radius + 1 entries only at either end of the board.
        pos = mine[0]["position"]
        want = min(radius, pos - 1) + 1 + min(radius, truth.n - pos)
        positions = [e["position"] for e in entries]
        if len(entries) != want or positions != list(
            range(positions[0], pos + 1 + min(radius, truth.n - pos))
        ):
            self.fail(
                f"{basis} nearby {player_id(i)}: {len(entries)} entries, want {want} "
                f"(position {pos} of {truth.n})"
            )


# --------------------------------------------------------------------------- load

# Headers of every read (``--read-auth token``: a reader token, as a game's front end
# sends; empty for open reads), and the same as raw header lines for LeanHttp.
READ_HEADERS: dict[str, str] = {}
READ_HEADER_LINES = ""


def use_read_auth(env: dict[str, str], mode: str) -> None:
    """Run the stack with ``LB_READ_AUTH=mode`` and sign every read for it."""
    global READ_HEADER_LINES
    if mode == "open":
        return
    from api.tokens import issue_reader_token
    from conf.settings import LOCAL_PLAYER_TOKEN_KEY

    env["LB_READ_AUTH"] = mode
    env["LB_PLAYER_TOKEN_KEY"] = LOCAL_PLAYER_TOKEN_KEY
    env.pop("LB_READ_RATE_LIMIT", None)
    token = issue_reader_token(LOCAL_PLAYER_TOKEN_KEY.encode(), "bench", 86_400)
    READ_HEADERS["Authorization"] = f"Bearer {token}"
    READ_HEADER_LINES = "".join(f"{k}: {v}\r\n" for k, v in READ_HEADERS.items())


class _LeanConn(asyncio.Protocol):
    """One keep-alive connection of a :class:`LeanPool`, one GET in flight at a
    time. It keeps the status and the body bytes of each answer, nothing else; it
    relies on what uvicorn sends for these answers (a Content-Length)."""

    __slots__ = ("pool", "transport", "buf", "k", "need", "body_at")

    def __init__(self, pool: LeanPool) -> None:
        self.pool = pool
        self.transport: Any = None
        self.buf = b""
        self.k = -1  # the request in flight, -1 when idle
        self.need = 0  # bytes of the answer in flight once its head is read
        self.body_at = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.pool.ready(self)

    def send(self, k: int) -> None:
        self.k = k
        self.transport.write(self.pool.requests[k])

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        if not self.need:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            head = buf[:end].lower()
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                self.buf = b""
                self.transport.close()  # connection_lost counts the error
                return
            stop = head.find(b"\r\n", at + 2)
            self.body_at = end + 4
            self.need = self.body_at + int(head[at + 17 : stop if stop > 0 else end])
        if len(buf) < self.need:
            self.buf = buf
            return
        k, self.k = self.k, -1
        status, body = int(buf[9:12]), buf[self.body_at : self.need]
        self.buf, self.need = b"", 0
        self.pool.done(self, k, status, body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.lost(self)


class LeanPool:
    """The open loop's client: at most ``limit`` keep-alive connections (asyncio
    protocols), each GET pre-encoded before the phase, a GET queued while every
    connection is busy (as aiohttp's connector queues them). Per request it costs
    a transport write and one ``data_received``; aiohttp's client cost about
    0.3-0.4 ms of CPU per request on these cores, which the service then lacked."""

    def __init__(self, host: str, port: int, requests: list[bytes], limit: int) -> None:
        self.host, self.port, self.limit = host, port, limit
        self.requests = requests
        n = len(requests)
        self.ends = [0.0] * n
        self.statuses = [0] * n
        self.bodies: list[bytes | None] = [None] * n
        self.failed: dict[int, str] = {}
        self.idle: deque[_LeanConn] = deque()
        self.pending: deque[int] = deque()
        self.opened = 0
        self.left = n
        self.loop = asyncio.get_running_loop()
        self.finished = self.loop.create_future()
        if not n:
            self.finished.set_result(None)

    async def connect(self, count: int) -> None:
        """Open ``count`` connections before the phase (not on its clock)."""
        await asyncio.gather(*(self._open() for _ in range(count)))

    def submit(self, k: int) -> None:
        if self.idle:
            # FIFO: every connection is used in turn, none idles into uvicorn's
            # keep-alive timeout mid-phase.
            self.idle.popleft().send(k)
            return
        self.pending.append(k)
        if self.opened < self.limit:
            self.loop.create_task(self._open())

    async def _open(self) -> None:
        self.opened += 1
        try:
            await self.loop.create_connection(
                lambda: _LeanConn(self), self.host, self.port
            )
        except OSError as exc:
            self.opened -= 1
            if self.pending:
                self._fail(self.pending.popleft(), type(exc).__name__)

    def ready(self, conn: _LeanConn) -> None:
        if self.pending:
            conn.send(self.pending.popleft())
        else:
            self.idle.append(conn)

    def done(self, conn: _LeanConn, k: int, status: int, body: bytes) -> None:
        self.ends[k] = self.loop.time()
        self.statuses[k] = status
        self.bodies[k] = body
        self.ready(conn)
        self.left -= 1
        if not self.left:
            self.finished.set_result(None)

    def _fail(self, k: int, error: str) -> None:
        self.failed[k] = error
        self.left -= 1
        if not self.left and not self.finished.done():
            self.finished.set_result(None)

    def lost(self, conn: _LeanConn) -> None:
        self.opened -= 1
        if conn.k >= 0:
            self._fail(conn.k, "ServerDisconnectedError")
        else:
            try:
                self.idle.remove(conn)
            except ValueError:
                pass
        if self.pending and self.opened < self.limit:
            self.loop.create_task(self._open())

    async def wait(self, timeout: float) -> None:
        """Until every answer is in, or ``timeout``: the rest are timeouts."""
        try:
            await asyncio.wait_for(asyncio.shield(self.finished), timeout)
        except TimeoutError:
            for k in range(len(self.requests)):
                if self.bodies[k] is None and k not in self.failed:
                    self.failed[k] = "TimeoutError"

    def close(self) -> None:
        for conn in list(self.idle):
            conn.transport.close()
        self.idle.clear()


def encode_gets(urls: list[str]) -> tuple[str, int, list[bytes]]:
    """Host, port and the raw HTTP/1.1 GETs (with the read headers) of ``urls``,
    all on one server."""
    rest = urls[0].split("://", 1)[1] if urls else "127.0.0.1/"
    hostport = rest.split("/", 1)[0]
    host, _, port = hostport.partition(":")
    tail = f" HTTP/1.1\r\nHost: {hostport}\r\n{READ_HEADER_LINES}\r\n"
    cut = len(urls[0]) - len(rest) + len(hostport) if urls else 0
    return (
        host,
        int(port or 80),
        [f"GET {u[cut:]}{tail}".encode("latin-1") for u in urls],
    )


async def open_loop(
    session: Any,
    url_of: Any,
    rate: float,
    seconds: float,
    check: Any,
    meter: CpuMeter | None = None,
    client: str = "lean",
    connections: int = 64,
) -> dict[str, Any]:
    """Send rate*seconds GETs at their scheduled times; latency from the schedule.

    ``client`` "lean" (a :class:`LeanPool` of ``connections`` keep-alive
    connections, every GET encoded before the phase) or "aiohttp" (``session``,
    the client used until session 16, kept to compare the generator's CPU per
    request with). Every answer is checked (``check(body, meta)``) after the last
    one came back, with ``meter`` halted first: the generator shares the cores
    with the API and Redis, and a check can cost more than the read (a history
    answer is compared with two offline sorts of every player), so checking while
    the clock runs would measure the bench, not the service. ``meter`` restarts
    when the sends begin (what comes before, encoding and connecting, is not the
    phase's)."""
    count = int(rate * seconds)
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    done_at: list[float] = []
    sent_at: list[float] = []  # scheduled send, seconds into the phase
    pauses = GcPauses()
    replies: list[tuple[bytes, Any]] = []
    if client == "lean":
        targets = [url_of(k) for k in range(count)]
        host, port, requests = encode_gets([url for url, _ in targets])
        pool = LeanPool(host, port, requests, connections)
        await pool.connect(connections)
        if meter is not None:
            meter.restart()
        t0 = loop.time() + 0.05
        with pauses:
            submit = pool.submit
            for k in range(count):
                delay = t0 + k / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                submit(k)
            await pool.wait(30.0)
        if meter is not None:
            meter.halt()
        pool.close()
        for k in range(count):
            if k in pool.failed:
                errors[pool.failed[k]] += 1
                continue
            end = pool.ends[k]
            done_at.append(end)
            if pool.statuses[k] != 200:
                errors[f"http {pool.statuses[k]}"] += 1
                continue
            latencies.append(end - t0 - k / rate)
            sent_at.append(k / rate)
            replies.append((pool.bodies[k], targets[k][1]))  # type: ignore[arg-type]
        del pool, targets
    else:
        import aiohttp

        async def one(k: int, scheduled: float) -> None:
            url, meta = url_of(k)
            try:
                async with session.get(url) as reply:
                    content = await reply.read()
                    status = reply.status
            except (TimeoutError, aiohttp.ClientError) as exc:
                errors[type(exc).__name__] += 1
                return
            end = loop.time()
            done_at.append(end)
            if status != 200:
                errors[f"http {status}"] += 1
                return
            latencies.append(end - scheduled)
            sent_at.append(scheduled - t0)
            replies.append((content, meta))

        tasks = []
        if meter is not None:
            meter.restart()
        t0 = loop.time() + 0.05
        with pauses:
            for k in range(count):
                scheduled = t0 + k / rate
                delay = scheduled - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(k, scheduled)))
            await asyncio.gather(*tasks)
        if meter is not None:
            meter.halt()
    for content, meta in replies:
        check(orjson.loads(content), meta)
    span = (max(done_at) - t0) if done_at else float("nan")
    return {
        "client": client,
        "offered_rate": rate,
        "sent": count,
        "ok": len(latencies),
        "achieved_rate": round(len(latencies) / span, 1) if done_at else 0,
        "errors": dict(errors),
        **summarize_ms(latencies),
        "slow": slow_windows(sent_at, latencies),
        "generator_gc": pauses.report(
            [t0 + at for at in sent_at], latencies, over_ms=20.0
        ),
        "t0_monotonic": t0,
    }


def slow_windows(
    sent_at: list[float], latencies: list[float], over_ms: float = 20.0
) -> list[dict[str, float]]:
    """Requests slower than ``over_ms`` grouped by the 100 ms window they were
    scheduled in: a few dense windows are stalls (one process stopped), a thin
    spread is queueing."""
    windows: Counter[int] = Counter()
    worst: dict[int, float] = {}
    for at, latency in zip(sent_at, latencies, strict=True):
        if latency * 1000 > over_ms:
            w = int(at * 10)
            windows[w] += 1
            worst[w] = max(worst.get(w, 0.0), latency * 1000)
    return [
        {"at_s": w / 10, "slow": c, "max_ms": round(worst[w], 1)}
        for w, c in sorted(windows.items())
    ]


class MachineSampler:
    """Every 20 ms, from a thread: the machine's CPU split (``/proc/stat``: busy,
    steal, iowait) and each watched process's CPU (``/proc/<pid>/stat``).

    A burst of slow requests in one 100 ms window is a stall of something; this
    tells which: the hypervisor taking the CPU (steal), the disk (iowait), another
    process, or the API workers or Redis busy themselves. The kernel counts in
    ticks of 10 ms, so a window's figures are coarse (about +-10 ms).

    It runs in the generator's process, 50 times a second: the files stay open
    and are read again with ``pread`` (opening and decoding them through
    ``Path.read_text`` cost 0.7 ms of CPU per sample, 30 us per request at 1,000
    requests/s, and held the event loop's GIL as long)."""

    PERIOD_S = 0.02

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._fds: dict[str, int] = {}

    def _snap(self) -> dict[str, float]:
        parts = os.pread(self._fds["/stat"], 512, 0).split(b"\n", 1)[0].split()
        busy = sum(int(x) for x in parts[1:9]) - int(parts[4]) - int(parts[5])
        snap = {
            "busy_ms": busy * TICK_MS,
            "steal_ms": int(parts[8]) * TICK_MS,
            "iowait_ms": int(parts[5]) * TICK_MS,
        }
        for name in self.pids:
            fd = self._fds.get(name)
            try:
                fields = os.pread(fd, 1024, 0).rsplit(b")", 1)[1].split()  # type: ignore[arg-type]
                snap[f"{name}_ms"] = (int(fields[11]) + int(fields[12])) * TICK_MS
            except (OSError, TypeError):
                snap[f"{name}_ms"] = 0.0  # gone (or never there)
        return snap

    def _run(self) -> None:
        # time.sleep, not Event.wait: a timed wait on a lock costs twice the CPU
        # per wake-up (about 120 against 60 us on this VM, loaded).
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._snap()))
            time.sleep(self.PERIOD_S)

    def __enter__(self) -> MachineSampler:
        self._fds["/stat"] = os.open("/proc/stat", os.O_RDONLY)
        for name, pid in self.pids.items():
            try:
                self._fds[name] = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
            except OSError:
                pass
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def between(self, start: float, end: float) -> dict[str, float]:
        """What the machine and each process did from ``start`` to ``end``
        (monotonic seconds): the samples just outside the interval."""
        samples = list(self.samples)
        if not samples:
            return {}
        first = max((s for s in samples if s[0] <= start), default=samples[0])
        last = min((s for s in samples if s[0] >= end), default=samples[-1])
        out = {k: round(last[1][k] - first[1][k], 1) for k in first[1]}
        out["span_ms"] = round((last[0] - first[0]) * 1000, 1)
        return out

    def explain(
        self, t0: float, windows: list[dict[str, float]]
    ) -> list[dict[str, Any]]:
        """Each slow window with what happened from its first scheduled send to
        its slowest answer."""
        return [
            {
                **w,
                "machine": self.between(
                    t0 + w["at_s"], t0 + w["at_s"] + 0.1 + w["max_ms"] / 1000
                ),
            }
            for w in windows
        ]


TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def proc_cpu_ms(pid: int) -> float:
    """utime + stime of ``pid`` in ms (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def gc_pauses(url: str) -> dict[str, float]:
    """The API workers' collections so far (``lb_gc_pause_seconds``, summed over
    workers): count and seconds per generation, and how many took >= 5 ms."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "lb_gc_pause_seconds":
            continue
        for sample in family.samples:
            g = sample.labels.get("generation")
            if sample.name.endswith("_count"):
                out[f"gen{g}_count"] = sample.value
            elif sample.name.endswith("_sum"):
                out[f"gen{g}_s"] = sample.value
            elif sample.name.endswith("_bucket") and sample.labels["le"] == "0.005":
                out[f"gen{g}_under_5ms"] = sample.value
    return out


def gc_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Collections during a phase: per generation, count, total ms, count >= 5 ms."""
    out: dict[str, Any] = {}
    for g in range(3):
        count = after.get(f"gen{g}_count", 0) - before.get(f"gen{g}_count", 0)
        under = after.get(f"gen{g}_under_5ms", 0) - before.get(f"gen{g}_under_5ms", 0)
        total = after.get(f"gen{g}_s", 0) - before.get(f"gen{g}_s", 0)
        out[f"gen{g}"] = {
            "count": int(count),
            "total_ms": round(total * 1000, 1),
            "over_5ms": int(count - under),
        }
    return out


class LeanHttp:
    """A minimal HTTP/1.1 keep-alive GET client on asyncio streams, for the closed
    loops: the load generator shares the 2 cores with the service, and aiohttp
    costs about 150-300 us of CPU per request, as much as the service's answer.
    It relies on what uvicorn sends for these answers (a Content-Length)."""

    def __init__(self, url: str) -> None:
        rest = url.split("://", 1)[1]
        self.host, _, port = rest.split("/", 1)[0].partition(":")
        self.port = int(port or 80)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, url: str) -> tuple[int, bytes]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port
            )
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        head = f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n{READ_HEADER_LINES}\r\n"
        self.writer.write(head.encode("latin-1"))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        at = head.lower().find(b"\r\ncontent-length:")
        if at < 0:
            raise RuntimeError(f"no Content-Length in {head[:200]!r}")
        length = int(head[at + 17 : head.index(b"\r\n", at + 2)])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def closed_loop(
    session: Any, url_of: Any, connections: int, seconds: float, check: Any
) -> dict[str, Any]:
    """``connections`` keep-alive connections, each sending its next GET when the
    last answer arrived (LeanHttp clients; ``session`` is unused)."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    deadline = time.perf_counter() + seconds
    counter = [0]

    async def worker() -> None:
        client = LeanHttp(url_of(0)[0])
        try:
            while time.perf_counter() < deadline:
                counter[0] += 1
                url, meta = url_of(counter[0])
                start = time.perf_counter()
                status, content = await client.get(url)
                if status != 200:
                    errors[f"http {status}"] += 1
                    continue
                latencies.append(time.perf_counter() - start)
                if counter[0] % 50 == 0:
                    check(orjson.loads(content), meta)
        finally:
            client.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.perf_counter() - t0
    return {
        "connections": connections,
        "client": "LeanHttp (asyncio streams, keep-alive)",
        "seconds": round(elapsed, 1),
        "ok": len(latencies),
        "rate": round(len(latencies) / elapsed, 1),
        "errors": dict(errors),
        **summarize_ms(latencies),
    }


def start_profile(
    api_pid: int, name: str, seconds: float, stamp: str, out_dir: Path
) -> tuple[Any, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"reads-prof-{stamp}-{name}.txt"
    spy = Path(sys.executable).parent / "py-spy"
    proc = subprocess.Popen(
        [
            str(spy),
            "record",
            "--nonblocking",
            "-r",
            "100",
            "-d",
            str(int(seconds)),
            "--format",
            "raw",
            "-o",
            str(out),
            "-p",
            str(api_pid),
            # `lb up` runs one worker per core under uvicorn's supervisor.
            "--subprocesses",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, out


def summarize_profile(path: Path, top: int = 12) -> dict[str, Any]:
    """Leaf (self) and inclusive sample shares per function from py-spy raw output."""
    leaf: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"error": f"no profile at {path}"}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [
            f.split(" (")[0] + " " + f.split("/")[-1].rstrip(")")
            for f in stack.split(";")
            if f
        ]
        total += n
        if frames:
            leaf[frames[-1]] += n
        for f in set(frames):
            incl[f] += n

    def share(c: Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / max(1, total), 1)) for k, v in c.most_common(top)]

    return {
        "samples": total,
        "file": str(path),
        "self_pct": share(leaf),
        "inclusive_pct": share(incl),
    }


def redis_cpu_note(pids: dict[str, int]) -> CpuMeter:
    return CpuMeter(pids)


# --------------------------------------------------------------------------- memory


def memory_report(
    r: redis.Redis,
    partitions: int,
    boards: list[str],
    live_totals: np.ndarray,
    changed: int,
    full_zset: bool = True,
) -> dict[str, Any]:
    def usage(key: str) -> int:
        return int(r.memory_usage(key, samples=0) or 0)

    per_board = {}
    for board in boards:
        chz = chb = fw = bk = tot = members = 0
        tot_players = 0
        for p in range(partitions):
            base = f"lb:{{p{p}}}"
            chz += usage(f"{base}:chz:{board}")
            # The snapshot side (Keys.changed_snapshot): a bitmap of base rows.
            # With its per-block counts (lib/changed_counts.lua): same side.
            chb += usage(f"{base}:chb:{board}") + usage(f"{base}:chc:{board}")
            fw += usage(f"{base}:fw:{board}")
            bk += usage(f"{base}:bk:{board}")
            tot += usage(f"{base}:tot:{board}")
            members += int(r.zcard(f"{base}:chz:{board}"))
            tot_players += int(r.hlen(f"{base}:tot:{board}"))
        per_board[board] = {
            "changed_players": members,
            "chz_bytes": chz,
            "chb_bytes": chb,
            "changed_bytes_per_changed_player": round((chz + chb) / max(1, members), 1),
            "fenwick_bytes": fw,
            "buckets_bytes": bk,
            "totals_hash_bytes": tot,
            "totals_players": tot_players,
            "totals_bytes_per_player": round(tot / max(1, tot_players), 1),
            # Issue 11's "only deltas": a rebase onto a generation with versions
            # drops the totals of players unchanged since (changed ones keep one).
            "unchanged_players_with_totals": max(0, tot_players - members),
        }
    if not full_zset:
        return {
            "boards": per_board,
            "expected_changed_players_per_board": changed,
            "used_memory": r.info("memory")["used_memory"],
        }
    # A full sorted set of the biggest board, in the same Redis, for comparison.
    scratch = "bench:reads:fullzset"
    r.delete(scratch)
    n = len(live_totals)
    for k in range(0, n, 10_000):
        r.zadd(
            scratch,
            {player_id(i): float(live_totals[i]) for i in range(k, min(n, k + 10_000))},
        )
    full = usage(scratch)
    card = int(r.zcard(scratch))
    r.delete(scratch)
    return {
        "boards": per_board,
        "expected_changed_players_per_board": changed,
        "full_zset": {
            "board": BOARD,
            "players": card,
            "bytes": full,
            "bytes_per_player": round(full / max(1, card), 1),
        },
        "used_memory": r.info("memory")["used_memory"],
    }


def segment_report(
    segments_dir: Path, generation: str, board: str, population: int
) -> dict[str, Any]:
    gdir = segments_dir / generation
    manifest = orjson.loads((gdir / "manifest.json").read_bytes())
    meta = manifest["boards"][board]
    files = {
        "segment": gdir / meta.get("file", f"{board}.arrow"),
        "index": gdir / meta.get("index", f"{board}.index.arrow"),
        "buckets": gdir / meta.get("buckets", f"{board}.buckets.arrow"),
    }
    sizes = {k: (v.stat().st_size if v.exists() else None) for k, v in files.items()}
    main = (sizes["segment"] or 0) + (sizes["index"] or 0)
    return {
        "board": board,
        "population": population,
        "files": {k: str(v.name) for k, v in files.items()},
        "bytes": sizes,
        "segment_plus_index_bytes_per_player": round(main / max(1, population), 2),
        "buckets_bytes_per_player": round(
            (sizes["buckets"] or 0) / max(1, population), 4
        ),
        "generation_dir_bytes": sum(f.stat().st_size for f in gdir.iterdir()),
    }


# --------------------------------------------------------------------------- run


def child_pids(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (uvicorn's workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry.name))
    return sorted(found)


def api_rss_mib(pids: dict[str, int]) -> dict[str, float]:
    """Resident memory (VmRSS) of the API's processes, MiB: the supervisor and each
    worker (a mapped segment's pages count where they are touched)."""
    out = {}
    for name, pid in pids.items():
        if not name.startswith("api"):
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                out[name] = round(int(line.split()[1]) / 1024, 1)
    return out


def cold_reads(url: str, changed: int, repeat: int = 4) -> dict[str, list[float]]:
    """The first reads of a new generation, one at a time (seconds each): they map
    the board and derive what a worker keeps per generation (the partition-local
    rows of live reads, speed/baserows.py). ``repeat`` of each, so that both API
    workers are likely to take one."""
    paths = {
        "snapshot_rank": f"players/{player_id(1)}?mode=snapshot",
        "snapshot_top100": "top?limit=100&mode=snapshot",
        "live_rank": f"players/{player_id(changed)}",
        "live_top100": "top?limit=100",
        "live_nearby5": f"players/{player_id(changed)}/nearby?radius=5",
    }
    out: dict[str, list[float]] = {}
    for name, path in paths.items():
        for _ in range(repeat):
            request = urllib.request.Request(
                f"{url}/v1/boards/{BOARD}/{path}", headers=READ_HEADERS
            )
            t0 = time.perf_counter()
            with urllib.request.urlopen(request, timeout=900) as reply:
                reply.read()
            out.setdefault(name, []).append(round(time.perf_counter() - t0, 3))
    return out


async def measure(
    url: str,
    args: argparse.Namespace,
    pids: dict[str, int],
    gen_truth: Truth,
    live_truth: Truth,
    changed: set[int],
    stamp: str,
    r: redis.Redis,
) -> dict[str, Any]:
    import aiohttp

    n = gen_truth.n
    rng = random.Random(args.seed + 7)
    checker = Checker()
    want_top_gen = gen_truth.top(100)
    want_top_live = live_truth.top(100)
    want_top_live_dense = live_truth.top_dense(100)
    b = BOARD
    api = f"{url}/v1/boards/{b}"
    changed_list = sorted(changed)
    phases: dict[str, Any] = {}

    def rnd(_: int) -> int:
        return rng.randrange(n)

    specs: list[tuple[str, Any, Any]] = [
        (
            "snapshot_top100",
            lambda k: (f"{api}/top?limit=100&mode=snapshot", None),
            lambda body, _: checker.top(body, want_top_gen, "snapshot"),
        ),
        (
            "snapshot_rank",
            lambda k: (lambda i: (f"{api}/players/{player_id(i)}?mode=snapshot", i))(
                rnd(k)
            ),
            lambda body, i: checker.rank(body, i, gen_truth, "snapshot"),
        ),
        (
            "snapshot_nearby5",
            lambda k: (
                lambda i: (
                    f"{api}/players/{player_id(i)}/nearby?radius=5&mode=snapshot",
                    i,
                )
            )(rnd(k)),
            lambda body, i: checker.nearby(body, i, gen_truth, "snapshot", 5),
        ),
        (
            "live_rank",
            lambda k: (lambda i: (f"{api}/players/{player_id(i)}", i))(rnd(k)),
            lambda body, i: checker.rank(body, i, live_truth, "live"),
        ),
        (
            "live_top100",
            lambda k: (f"{api}/top?limit=100", None),
            lambda body, _: checker.top(body, want_top_live, "live"),
        ),
        (
            "live_nearby5",
            lambda k: (lambda i: (f"{api}/players/{player_id(i)}/nearby?radius=5", i))(
                rnd(k)
            ),
            lambda body, i: checker.nearby(body, i, live_truth, "live", 5),
        ),
        # Ranking per query (issue 27): dense ranks of the live board merge the
        # generation's distinct-score counts with the changes (live_dense.lua).
        (
            "live_rank_dense",
            lambda k: (lambda i: (f"{api}/players/{player_id(i)}?ranking=dense", i))(
                rnd(k)
            ),
            lambda body, i: checker.dense_rank(body, i, live_truth),
        ),
        (
            "live_top100_dense",
            lambda k: (f"{api}/top?limit=100&ranking=dense", None),
            lambda body, _: checker.top(body, want_top_live_dense, "live"),
        ),
        (
            "approx_rank",
            lambda k: (lambda i: (f"{api}/players/{player_id(i)}?mode=approx", i))(
                rnd(k)
            ),
            # Only what the error check needs: a tuple of atoms leaves the
            # collector's lists, 15,000 kept bodies would not (see GcPauses).
            lambda body, i: approx_seen.append(
                (i, body["rank"], body["errorBound"], body.get("exactness"))
            ),
        ),
    ]
    approx_seen: list[tuple[int, int, int, str | None]] = []
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=args.connections),
        timeout=timeout,
        headers=READ_HEADERS,
    ) as session:
        # Warm-up: map the segments, load scripts, and open connections the way
        # the phases use them: concurrent requests grow the API workers' Redis
        # pools (a new redis-py connection costs milliseconds of CPU, which would
        # otherwise land inside the first measured phase as a latency spike).
        async def warm(url: str) -> None:
            async with session.get(url) as reply:
                await reply.read()

        for _name, url_of, _check in specs:
            for _ in range(3):
                await asyncio.gather(
                    *(warm(url_of(k)[0]) for k in range(args.connections))
                )
        # The generator's own full collections stop its event loop, which shows
        # as latency of every request in flight (GcPauses). Everything alive now
        # (set-up, modules, truth) lives to the end: out of the collector's walks.
        heap = {"gc_tracked_objects": len(gc.get_objects())}
        if not args.no_gc_freeze:
            gc.collect()
            gc.freeze()
        heap["frozen"] = gc.get_freeze_count()
        print(f"  generator heap: {heap}", flush=True)
        for index, (spec_name, url_of, check) in enumerate(specs):
            if args.only and spec_name not in args.only.split(","):
                continue
            for name, client in phase_clients(spec_name, args.client, index):
                print(
                    f"  {name}: {args.rate:g} req/s x {args.seconds:g} s ...",
                    flush=True,
                )
                before = loadavg()
                prof = (
                    start_profile(pids["api"], name, args.seconds, stamp, args.out)
                    if args.profile
                    else None
                )
                meter = CpuMeter(pids)
                redis_before = redis_forks(r)
                commands_before = redis_command_usec(r)
                api_gc_before = gc_pauses(url)
                with MachineSampler(pids) as sampler:
                    result = await open_loop(
                        session,
                        url_of,
                        args.rate,
                        args.seconds,
                        check,
                        meter,
                        client,
                        args.connections,
                    )
                result["cpu"] = meter.stop(result["ok"])
                result["api_gc"] = gc_delta(api_gc_before, gc_pauses(url))
                t0 = result.pop("t0_monotonic")
                result["machine"] = sampler.between(t0, t0 + args.seconds + 1)
                result["slow"] = sampler.explain(t0, result["slow"])
                result["redis_before"] = redis_before
                result["redis_after"] = redis_forks(r)
                # Scripts count as EVALSHA and each command they call as its own.
                result["redis_commands"] = redis_command_delta(
                    commands_before, redis_command_usec(r), result["ok"]
                )
                result["loadavg_before"], result["loadavg_after"] = before, loadavg()
                if prof:
                    prof[0].wait(timeout=args.seconds + 30)
                    result["profile"] = summarize_profile(prof[1])
                phases[name] = result
                report_phase(result)
        if args.closed_seconds > 0:
            print(
                f"  snapshot_top100 closed loop: {args.closed_connections} conns x "
                f"{args.closed_seconds:g} s ...",
                flush=True,
            )
            before = loadavg()
            prof = (
                start_profile(
                    pids["api"], "closed_top", args.closed_seconds, stamp, args.out
                )
                if args.profile
                else None
            )
            meter = CpuMeter(pids)
            result = await closed_loop(
                session,
                specs[0][1],
                args.closed_connections,
                args.closed_seconds,
                specs[0][2],
            )
            result["cpu"] = meter.stop(result["ok"])
            result["loadavg_before"], result["loadavg_after"] = before, loadavg()
            if prof:
                prof[0].wait(timeout=args.closed_seconds + 30)
                result["profile"] = summarize_profile(prof[1])
            phases["snapshot_top100_closed"] = result
            print(
                f"    {result['rate']} req/s, p50 {result['p50_ms']} p99 "
                f"{result['p99_ms']} ms",
                flush=True,
            )

        if args.closed_seconds > 0 and args.base != "direct":
            # (It builds a full sorted set of the board in Redis: not at 100 M.)
            phases.update(
                await top_ceilings(session, specs[4], args, pids, stamp, r, live_truth)
            )

        # 5. Approximate error on a sample: half changed, half unchanged players.
        print(f"  approx error sample: {args.sample} players ...", flush=True)
        sample = rng.sample(changed_list, min(len(changed_list), args.sample // 2))
        sample += rng.sample(range(n), args.sample - len(sample))
        sem = asyncio.Semaphore(8)
        rows: list[tuple[int, dict[str, Any], dict[str, Any]]] = []

        async def pair(i: int) -> None:
            async with sem:
                async with session.get(
                    f"{api}/players/{player_id(i)}?mode=approx"
                ) as r1:
                    approx = orjson.loads(await r1.read())
                async with session.get(f"{api}/players/{player_id(i)}") as r2:
                    exact = orjson.loads(await r2.read())
                rows.append((i, approx, exact))

        await asyncio.gather(*(pair(i) for i in sample))
    errs, bounds, violations = [], [], []
    exact_mismatch = 0
    seen: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
        (i, {"rank": rank, "errorBound": bound, "exactness": exactness}, None)
        for i, rank, bound, exactness in approx_seen
    ]
    for i, approx, exact in rows + seen:
        want = live_truth.rank(i)
        if exact is not None:
            checker.rank(exact, i, live_truth, "live")
            if exact.get("rank") != want:
                exact_mismatch += 1
        err = abs(approx["rank"] - want)
        errs.append(err)
        bounds.append(approx["errorBound"])
        if err > approx["errorBound"] or approx.get("exactness") != "approximate":
            violations.append(
                {
                    "player": player_id(i),
                    "approx": approx["rank"],
                    "exact": want,
                    "errorBound": approx["errorBound"],
                    "exactness": approx.get("exactness"),
                }
            )

    def pct(values: list[int]) -> dict[str, float]:
        return {f"p{p}": percentile(values, p) for p in (50, 90, 99)} | {
            "max": max(values) if values else None,
            "mean": round(sum(values) / len(values), 1) if values else None,
        }

    approx_error = {
        "sample_players": len(rows),
        "also_from_open_loop": len(approx_seen),
        "abs_error": pct(errs),
        "error_bound": pct(bounds),
        "relative_error_pct_of_population": round(
            100 * (max(errs) if errs else 0) / n, 4
        ),
        "violations": len(violations),
        "violation_examples": violations[:10],
        "exact_live_mismatches_in_sample": exact_mismatch,
    }
    return {
        "phases": phases,
        "generator_heap": heap,
        "approx_error": approx_error,
        "verification": {"checked": checker.checked, "bad": checker.bad},
    }


def diff_truth(old: Truth, new: Truth, limit: int) -> dict[str, Any]:
    """What ``/diff?from=g1&to=g2&limit=`` must answer: the same players on both
    (none entered or left), movers by largest rank change, then playerId."""
    ranks = [
        (t.n - np.searchsorted(t.asc, t.totals, side="right") + 1).astype(np.int64)
        for t in (old, new)
    ]
    moved = np.flatnonzero(ranks[0] != ranks[1])
    change = np.abs(ranks[0][moved] - ranks[1][moved])
    order = moved[np.lexsort((moved, -change))][:limit]
    return {
        "movers": [
            {
                "playerId": player_id(int(i)),
                "fromRank": int(ranks[0][i]),
                "toRank": int(ranks[1][i]),
                "fromScore": int(old.totals[i]),
                "toScore": int(new.totals[i]),
            }
            for i in order
        ],
        "entered": [],
        "left": [],
        "counts": {"movers": len(moved), "entered": 0, "left": 0},
    }


async def history_phases(
    url: str,
    args: argparse.Namespace,
    pids: dict[str, int],
    redis_url: str,
    truths: tuple[Truth, Truth],
    checker: Checker,
) -> dict[str, Any]:
    """Publish g2 from the live totals (``truths``: g1's and the live ones), then
    the open-loop history and diff reads, each answer checked
    (``Checker.history``, ``Checker.diff``). Run after everything else: the live
    board then merges g2 with no changes (and g2 keeps every total in Redis)."""
    import aiohttp

    gen_truth, live_truth = truths
    rng = random.Random(args.seed + 11)
    print("  publish g2 (direct, the live totals) for history and diff ...")
    g2 = await asyncio.to_thread(publish_direct, redis_url, live_truth.totals, 2, False)
    print(f"    {g2}", flush=True)
    await asyncio.sleep(1.0)  # the API notices the generation within 0.5 s
    gens = ("g1", g2["generation"])
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=args.connections),
        timeout=timeout,
        headers=READ_HEADERS,
    ) as session:
        return await _history_loops(
            session, url, args, pids, gens, truths, rng, checker
        )


async def _history_loops(
    session: Any,
    url: str,
    args: argparse.Namespace,
    pids: dict[str, int],
    gens: tuple[str, str],
    truths: tuple[Truth, Truth],
    rng: random.Random,
    checker: Checker,
) -> dict[str, Any]:
    gen_truth, live_truth = truths
    api = f"{url}/v1/boards/{BOARD}"
    want_diff = diff_truth(gen_truth, live_truth, 20)
    n = gen_truth.n
    specs = [
        (
            "history",
            lambda k: (lambda i: (f"{api}/players/{player_id(i)}/history", i))(
                rng.randrange(n)
            ),
            lambda body, i: checker.history(body, i, gens, (gen_truth, live_truth)),
        ),
        (
            "diff",
            lambda k: (f"{api}/diff?from={gens[0]}&to={gens[1]}&limit=20", None),
            lambda body, _: checker.diff(body, want_diff),
        ),
    ]
    phases: dict[str, Any] = {}
    for index, (spec_name, url_of, check) in enumerate(specs):
        if args.only and spec_name not in args.only.split(","):
            continue

        # Warm-up, as the other phases (every worker: the diff is computed once
        # per worker and generation pair, the history service opens the
        # generations).
        async def warm(target: str) -> None:
            async with session.get(target) as reply:
                await reply.read()

        for _ in range(3):
            await asyncio.gather(*(warm(url_of(k)[0]) for k in range(args.connections)))
        for name, client in phase_clients(spec_name, args.client, index):
            print(f"  {name}: {args.rate:g} req/s x {args.seconds:g} s ...", flush=True)
            meter = CpuMeter(pids)
            before = loadavg()
            api_gc_before = gc_pauses(url)
            with MachineSampler(pids) as sampler:
                result = await open_loop(
                    session,
                    url_of,
                    args.rate,
                    args.seconds,
                    check,
                    meter,
                    client,
                    args.connections,
                )
            result["cpu"] = meter.stop(result["ok"])
            # The same instruments as the other phases: a stall is either a
            # collection in a worker (api_gc) or something the machine shows.
            result["api_gc"] = gc_delta(api_gc_before, gc_pauses(url))
            t0 = result.pop("t0_monotonic")
            result["machine"] = sampler.between(t0, t0 + args.seconds + 1)
            result["slow"] = sampler.explain(t0, result["slow"])
            result["loadavg_before"], result["loadavg_after"] = before, loadavg()
            phases[name] = result
            report_phase(result)
    return phases


def phase_clients(name: str, clients: str, index: int) -> list[tuple[str, str]]:
    """(phase key, client) for each open-loop client of ``--client``: the phase's
    own name with one client; with several (an A/B of the generator), each run
    is keyed ``name@client`` and their order alternates from phase to phase, so
    a machine's drift falls on both."""
    names = clients.split(",")
    if len(names) == 1:
        return [(name, names[0])]
    if index % 2:
        names.reverse()
    return [(f"{name}@{client}", client) for client in names]


def report_phase(result: dict[str, Any]) -> None:
    """One open-loop phase on the console, as it ends."""
    cpu = result["cpu"]
    per = {
        k.removesuffix("_cpu_us_per_event"): v
        for k, v in cpu.items()
        if k.endswith("_cpu_us_per_event") and v
    }
    print(
        f"    p50 {result['p50_ms']} p99 {result['p99_ms']} max "
        f"{result['max_ms']} ms, {result['achieved_rate']} req/s, errors "
        f"{result['errors']}, other CPU {cpu['other_processes_cpu_s']} s",
        flush=True,
    )
    print(f"    CPU us per request ({result['client']}): {per}", flush=True)
    dense = sorted(result["slow"], key=lambda w: -w["slow"])[:6]
    if dense:
        print(f"    slowest 100 ms windows (> 20 ms): {dense}", flush=True)
    print(f"    generator GC: {result['generator_gc']}", flush=True)
    if result.get("redis_commands"):
        print(f"    Redis time by command: {result['redis_commands']}", flush=True)
    print(f"    API workers' GC: {result['api_gc']}", flush=True)
    print(f"    machine over the phase: {result['machine']}", flush=True)


async def raw_zrevrange(
    redis_url: str, key: str, connections: int, seconds: float
) -> dict[str, Any]:
    """The floor to compare a cached live top-100 with: Redis answering
    ``ZREVRANGE key 0 99 WITHSCORES`` from a full sorted set, closed loop, same
    connection count, from an equally lean client (asyncio streams + hiredis, the
    counterpart of LeanHttp) on the same cores."""
    import hiredis

    scheme, _, rest = redis_url.partition("://")
    host, _, port = rest.split("/", 1)[0].rpartition("@")[2].partition(":")

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if scheme == "unix":
            return await asyncio.open_unix_connection(rest)
        return await asyncio.open_connection(host, int(port or 6379))

    command = hiredis.pack_command(("ZREVRANGE", key, 0, 99, "WITHSCORES"))
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        reader, writer = await connect()
        parser = hiredis.Reader()
        try:
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                writer.write(command)
                reply = parser.gets()
                while reply is False:
                    parser.feed(await reader.read(65536))
                    reply = parser.gets()
                latencies.append(time.perf_counter() - start)
                if not isinstance(reply, list) or len(reply) != 200:
                    raise RuntimeError(f"ZREVRANGE returned {reply!r:.200}")
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.perf_counter() - t0
    return {
        "connections": connections,
        "client": "asyncio streams + hiredis",
        "seconds": round(elapsed, 1),
        "ok": len(latencies),
        "rate": round(len(latencies) / elapsed, 1),
        "errors": {},
        **summarize_ms(latencies),
    }


async def top_ceilings(
    session: Any,
    live_top_spec: tuple[str, Any, Any],
    args: argparse.Namespace,
    pids: dict[str, int],
    stamp: str,
    r: redis.Redis,
    live_truth: Truth,
) -> dict[str, Any]:
    """Closed-loop maxima at ``--top-connections``: the live top-100 (served from the
    read service's cache: no writes run during reads, so every hit is current) and,
    in the same run, raw Redis ZREVRANGE 0 99 WITHSCORES over a full sorted set of
    the same board."""
    phases: dict[str, Any] = {}
    conns = args.top_connections
    _, url_of, check = live_top_spec
    print(f"  live_top100 closed loop: {conns} conns x {args.closed_seconds:g} s ...")
    before = loadavg()
    prof = (
        start_profile(
            pids["api"], "closed_live_top", args.closed_seconds, stamp, args.out
        )
        if args.profile
        else None
    )
    meter = CpuMeter(pids)
    result = await closed_loop(session, url_of, conns, args.closed_seconds, check)
    result["cpu"] = meter.stop(result["ok"])
    result["loadavg_before"], result["loadavg_after"] = before, loadavg()
    if prof:
        prof[0].wait(timeout=args.closed_seconds + 30)
        result["profile"] = summarize_profile(prof[1])
    phases["live_top100_closed"] = result
    print(
        f"    {result['rate']} req/s, p50 {result['p50_ms']} p99 {result['p99_ms']} ms"
    )

    scratch = "bench:reads:top-zset"
    r.delete(scratch)
    totals = live_truth.totals
    for lo in range(0, len(totals), 10_000):
        r.zadd(
            scratch,
            {
                player_id(i): int(totals[i])
                for i in range(lo, min(len(totals), lo + 10_000))
            },
        )
    redis_url = os.environ["LB_REDIS_URL"]
    print(f"  raw Redis ZREVRANGE 0 99 WITHSCORES: {conns} conns ...", flush=True)
    before = loadavg()
    meter = CpuMeter(pids)
    raw = await raw_zrevrange(redis_url, scratch, conns, args.closed_seconds)
    raw["cpu"] = meter.stop(raw["ok"])
    raw["loadavg_before"], raw["loadavg_after"] = before, loadavg()
    r.delete(scratch)
    phases["redis_zrevrange100_closed"] = raw
    print(f"    {raw['rate']} req/s, p50 {raw['p50_ms']} p99 {raw['p99_ms']} ms")
    return phases


def run(
    args: argparse.Namespace,
    env: dict[str, str],
    data_dir: Path,
    port: int,
    report: dict[str, Any],
    stamp: str,
) -> None:
    url, redis_url, pids = start_stack(env, data_dir, port)
    # `lb up` starts one API worker per core: their CPU is the API's too.
    for k, child in enumerate(child_pids(pids["api"])):
        pids[f"api_worker{k}"] = child
    report["api_workers"] = sum(1 for name in pids if name.startswith("api_worker"))
    os.environ.update({k: v for k, v in env.items() if k.startswith("LB_")})
    os.environ["LB_REDIS_URL"] = redis_url
    r = redis.Redis.from_url(redis_url)
    fsync = r.config_get("appendfsync")["appendfsync"]
    report["load_before"] = {"loadavg": loadavg(), "top": top_processes()}

    rng = random.Random(args.seed)
    n = args.players
    steps = args.points_max // args.points_step
    if args.base == "direct":
        # Vectorised: a Python draw per player takes minutes at 100 M.
        draw = np.random.default_rng(args.seed).integers(0, steps + 1, n)
        gen_points = draw.astype(np.int64) * args.points_step
        del draw
    else:
        gen_points = np.array(
            [rng.randrange(steps + 1) * args.points_step for _ in range(n)],
            dtype=np.int64,
        )
        print(
            f"set-up: {n} events (1 per player) through SpeedLayer.apply ...",
            flush=True,
        )
        r.config_set("appendfsync", "everysec")
        try:
            meter = CpuMeter(pids)
            bulk = asyncio.run(
                apply_events(
                    redis_url, [(i, int(gen_points[i])) for i in range(n)], "bulk"
                )
            )
            bulk["cpu"] = meter.stop(n)
        finally:
            r.config_set("appendfsync", fsync)
        bulk["loadavg_after"] = loadavg()
        report["setup_bulk"] = bulk
        print(f"  {bulk}", flush=True)

    print(f"set-up: publish ({args.publish}) + rebase ...", flush=True)
    before = loadavg()
    meter = CpuMeter({"redis": pids["redis"], "api": pids["api"]})
    chain = DirectChain() if args.layers else None
    if args.base == "direct":
        publish = publish_base_direct(redis_url, gen_points)
    elif args.publish == "direct":
        publish = publish_direct(redis_url, gen_points, chain=chain)
    else:
        publish = publish_spark()
    publish["cpu"] = meter.stop(0)
    publish["loadavg_before"], publish["loadavg_after"] = before, loadavg()
    report["publish"] = publish
    generation = publish["generation"]
    print(f"  {publish}", flush=True)
    # --layers K: the served generation is g<K+1>, a chain of K layers per board
    # over g1's bases; its totals are the truth of every snapshot read.
    served_points = gen_points
    if chain is not None:
        served_points, report["layers"] = build_layers(
            args, redis_url, gen_points, chain, steps
        )
        generation = report["layers"][-1]["generation"]

    m = min(args.extra_events, n)
    changed_idx = rng.sample(range(n), m)
    extra_points = [(rng.randrange(steps) + 1) * args.points_step for _ in range(m)]
    print(f"set-up: {m} more events for {m} distinct players ...", flush=True)
    extra = asyncio.run(
        apply_events(
            redis_url, list(zip(changed_idx, extra_points, strict=True)), "more"
        )
    )
    report["setup_extra"] = extra
    print(f"  {extra}", flush=True)
    live_points = served_points.copy()
    for i, pts in zip(changed_idx, extra_points, strict=True):
        live_points[i] += pts
    gen_truth, live_truth = Truth(served_points), Truth(live_points)
    time.sleep(1.0)  # the API notices the generation within 0.5 s
    report["api_rss_mib_before_reads"] = api_rss_mib(pids)
    report["cold_reads"] = cold_reads(url, changed_idx[0])
    report["api_rss_mib_after_cold_reads"] = api_rss_mib(pids)
    print(f"  cold reads: {report['cold_reads']}", flush=True)

    print("reads:", flush=True)
    # uvloop (installed with uvicorn[standard]): the generator's own CPU per
    # request is lower, and it shares the cores with the service.
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        report.update(
            runner.run(
                measure(
                    url,
                    args,
                    pids,
                    gen_truth,
                    live_truth,
                    set(changed_idx),
                    stamp,
                    r,
                )
            )
        )
        if args.compare_compacted:
            report["compacted"] = compare_compacted(
                runner,
                url,
                args,
                pids,
                redis_url,
                (gen_truth, live_truth),
                set(changed_idx),
                chain,
                stamp,
                r,
            )
            report["compacted"]["layered_generation"] = generation
            report["compacted"]["comparison"] = layered_vs_compacted(report)
            verification = report["verification"]
            # Each half's own count in the comparison; the report's is both.
            report["compacted"]["layered_verification"] = {
                "checked": verification["checked"],
                "bad": list(verification["bad"]),
            }
            verification["checked"] += report["compacted"]["verification"]["checked"]
            verification["bad"] += report["compacted"]["verification"]["bad"]
            generation = report["compacted"]["publish"]["generation"]

    report["api_rss_mib_after_reads"] = api_rss_mib(pids)
    print(f"  API resident memory: {report['api_rss_mib_after_reads']}", flush=True)
    print("memory ...", flush=True)
    from conf.boards import load_boards  # noqa: F401 - same process settings
    from conf.settings import Settings

    settings = Settings()
    manifest = orjson.loads(
        (settings.segments_dir / generation / "manifest.json").read_bytes()
    )
    boards = sorted(manifest["boards"])
    report["boards"] = boards
    report["memory"] = memory_report(
        r, settings.partitions, boards, live_points, m, args.base != "direct"
    )
    report["segments"] = segment_report(settings.segments_dir, generation, BOARD, n)
    report["redis_info"] = {
        k: v
        for k, v in r.info().items()
        if k
        in (
            "used_memory",
            "used_memory_human",
            "maxmemory",
            "redis_version",
            "mem_allocator",
            "aof_enabled",
        )
    }
    # 7. Why a rank changed (API.md): history and diff need a second generation;
    # they run last (after the memory report, which g2 would change).
    only = args.only.split(",") if args.only else ["history", "diff"]
    if args.base == "direct":
        report["history_diff"] = "not run with --base direct"
    elif args.layers and ("history" in only or "diff" in only):
        # Checker.history and diff_truth model two generations (g1, g2 from the
        # live totals); a chain has more, and g2 is its first layer.
        print("history and diff: not run with --layers", flush=True)
        report["history_diff"] = "not run with --layers"
    elif "history" in only or "diff" in only:
        checker = Checker()
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            report["phases"].update(
                runner.run(
                    history_phases(
                        url, args, pids, redis_url, (gen_truth, live_truth), checker
                    )
                )
            )
        verification = report["verification"]
        verification["checked"] += checker.checked
        verification["bad"] += checker.bad
    report["load_after"] = {"loadavg": loadavg(), "top": top_processes()}
    r.close()


def compare_compacted(
    runner: asyncio.Runner,
    url: str,
    args: argparse.Namespace,
    pids: dict[str, int],
    redis_url: str,
    truths: tuple[Truth, Truth],
    changed: set[int],
    chain: DirectChain | None,
    stamp: str,
    r: redis.Redis,
) -> dict[str, Any]:
    """``--compare-compacted``: publish the layered generation's totals as one full
    generation (a full direct publish at its boundary: no new events, so the
    changes applied since stay the live ones), rebase, and measure the same phases
    against the same truths."""
    from conf.settings import Settings

    assert chain is not None
    settings = Settings()
    layered = max(
        (d for d in settings.segments_dir.iterdir() if (d / "manifest.json").exists()),
        key=lambda d: int(d.name[1:]),
    )
    manifest = orjson.loads((layered / "manifest.json").read_bytes())
    boundary = {int(p): int(v) for p, v in manifest["boundary"].items()}
    number = int(layered.name[1:]) + 1
    print(
        f"set-up: compacted g{number} (direct, full, {layered.name}'s totals and "
        "boundary) + rebase ...",
        flush=True,
    )
    before = loadavg()
    meter = CpuMeter({"redis": pids["redis"], "api": pids["api"]})
    gen_truth, live_truth = truths
    publish = publish_direct(
        redis_url, gen_truth.totals, number, boundary=boundary, chain=chain
    )
    publish["cpu"] = meter.stop(0)
    publish["loadavg_before"], publish["loadavg_after"] = before, loadavg()
    print(f"  {publish}", flush=True)
    time.sleep(1.0)  # the API notices the generation within 0.5 s
    print("reads (compacted):", flush=True)
    result = runner.run(
        measure(url, args, pids, gen_truth, live_truth, changed, stamp, r)
    )
    result["publish"] = publish
    return result


def verdicts(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    ph = report.get("phases", {})
    mem = report.get("memory", {})
    seg = report.get("segments", {})
    rows = []

    def row(name: str, value: Any, target: str, ok: bool | None) -> None:
        rows.append(
            (
                name,
                str(value),
                target,
                "n/a" if ok is None else ("met" if ok else "MISSED"),
            )
        )

    if "snapshot_top100_closed" in ph:
        v = ph["snapshot_top100_closed"]["rate"]
        row(
            "snapshot top-100 max rate (closed loop)",
            f"{v} req/s",
            ">= 3,000 req/s",
            v >= 3000,
        )
    if "live_top100_closed" in ph:
        v = ph["live_top100_closed"]["rate"]
        raw = ph.get("redis_zrevrange100_closed", {}).get("rate")
        conns = ph["live_top100_closed"]["connections"]
        row(
            f"live top-100 cached, {conns} conns (raw ZREVRANGE {raw} req/s)",
            f"{v} req/s",
            ">= 5,000 req/s",
            v >= 5000,
        )
    for name, limit in (
        ("snapshot_rank", 10),
        ("snapshot_top100", 10),
        ("snapshot_nearby5", 10),
        ("live_rank", 10),
        ("live_top100", 10),
        ("live_nearby5", 10),
        ("live_rank_dense", 10),
        ("live_top100_dense", 10),
        ("history", 10),
        ("diff", 10),
        ("approx_rank", 5),
    ):
        if name in ph:
            p = ph[name]
            ok = (
                p["p99_ms"] <= limit
                and p["achieved_rate"] >= 0.95 * p["offered_rate"]
                and not p["errors"]
            )
            row(
                f"{name} p99 @ {p['offered_rate']:g}/s",
                f"{p['p99_ms']} ms ({p['achieved_rate']} req/s)",
                f"<= {limit} ms",
                ok,
            )
    for cmp in report.get("compacted", {}).get("comparison", []):
        # Raw ZREVRANGE does not read the generation: the machine's drift between
        # the halves (in the table), not a verdict.
        if cmp["p99_ratio"] is not None and not cmp["phase"].startswith("redis_"):
            row(
                f"{cmp['phase']} p99 layered / compacted",
                f"{cmp['p99_ms'][0]} / {cmp['p99_ms'][1]} ms = {cmp['p99_ratio']}",
                "<= 1.10",
                cmp["p99_ratio"] <= 1.10,
            )
    boards = mem.get("boards", {})
    if BOARD in boards:
        v = boards[BOARD]["changed_bytes_per_changed_player"]
        row("Redis bytes / changed player / board (chz+chb)", v, "<= 150", v <= 150)
        v = boards[BOARD].get("unchanged_players_with_totals")
        row(
            "unchanged players with a total in Redis",
            v,
            "0",
            v == 0,
        )
    if seg:
        v = seg["segment_plus_index_bytes_per_player"]
        row("segment + index bytes / player", v, "<= 32", v <= 32)
    ae = report.get("approx_error")
    if ae:
        row(
            "approx violations (|err| > errorBound)",
            ae["violations"],
            "0",
            ae["violations"] == 0,
        )
    ver = report.get("verification")
    if ver:
        row(
            "answers checked vs offline sort / wrong",
            f"{ver['checked']} / {len(ver['bad'])}",
            "0 wrong",
            not ver["bad"],
        )
    return rows


def api_cpu(cpu: dict[str, Any]) -> float:
    """CPU seconds of the API: uvicorn's supervisor and every worker."""
    return round(
        sum(v for k, v in cpu.items() if k.startswith("api") and k.endswith("_cpu_s")),
        2,
    )


def layered_vs_compacted(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each phase measured on both generations (``--compare-compacted``): p99 and
    the API's CPU per answered request, layered and compacted, and their ratios."""
    layered, compacted = report.get("phases", {}), report["compacted"]["phases"]
    rows = []
    for name, a in layered.items():
        b = compacted.get(name)
        if b is None or "p99_ms" not in b:
            continue
        cpu = [
            round(api_cpu(p["cpu"]) * 1e6 / max(1, p.get("ok") or 0), 1) for p in (a, b)
        ]
        rows.append(
            {
                "phase": name,
                "p99_ms": [a["p99_ms"], b["p99_ms"]],
                "p99_ratio": round(a["p99_ms"] / b["p99_ms"], 3)
                if b["p99_ms"]
                else None,
                "api_cpu_us_per_request": cpu,
                "cpu_ratio": round(cpu[0] / cpu[1], 3) if cpu[1] else None,
            }
        )
    return rows


def print_comparison(report: dict[str, Any]) -> None:
    chain = report.get("layers") or [{}]
    print(
        f"\nlayered {report['compacted'].get('layered_generation')} (chain of "
        f"{len(report.get('layers', []))} layers, {chain[-1].get('layer_rows')} rows "
        f"in the last) vs compacted {report['compacted']['publish']['generation']}:"
    )
    print(
        f"{'phase':<24}{'p99 layered':>12}{'compacted':>11}{'ratio':>8}"
        f"{'cpu us/req L':>14}{'C':>8}{'ratio':>8}"
    )
    for row in report["compacted"]["comparison"]:
        print(
            f"{row['phase']:<24}{row['p99_ms'][0]:>12}{row['p99_ms'][1]:>11}"
            f"{row['p99_ratio']!s:>8}{row['api_cpu_us_per_request'][0]:>14}"
            f"{row['api_cpu_us_per_request'][1]:>8}{row['cpu_ratio']!s:>8}"
        )
    print(
        "(redis_*: raw Redis, no generation read: the machine's drift between halves)"
    )
    halves = [
        report["compacted"].get(key, {})
        for key in ("layered_verification", "verification")
    ]
    print(
        "answers checked / wrong: layered "
        f"{halves[0].get('checked')} / {len(halves[0].get('bad', []))}, compacted "
        f"{halves[1].get('checked')} / {len(halves[1].get('bad', []))}"
    )


def print_table(report: dict[str, Any]) -> None:
    ph = report.get("phases", {})
    print()
    print(
        f"{'phase':<24}{'offered':>9}{'achieved':>10}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'max ms':>9}{'errors':>8}{'api cpu':>9}{'other cpu':>10}{'load1':>7}"
    )
    for name, p in ph.items():
        offered = p.get("offered_rate", f"c{p.get('connections')}")
        achieved = p.get("achieved_rate", p.get("rate"))
        cpu = p["cpu"]
        print(
            f"{name:<24}{offered!s:>9}{achieved!s:>10}{p['p50_ms']:>9}{p['p99_ms']:>9}"
            f"{p['max_ms']:>9}{sum(p['errors'].values()):>8}{api_cpu(cpu):>9}"
            f"{cpu['other_processes_cpu_s']:>10}{p['loadavg_after'][0]:>7}"
        )
    if "compacted" in report:
        print_comparison(report)
    if "approx_error" in report:
        ae = report["approx_error"]
        print(
            f"\napprox |error|: {ae['abs_error']}  errorBound: {ae['error_bound']}  "
            f"violations: {ae['violations']}"
        )
    if "memory" in report:
        b = report["memory"]["boards"].get(BOARD, {})
        f = report["memory"].get("full_zset", {"bytes_per_player": "-"})
        print(
            f"Redis {BOARD}: changed {b.get('changed_players')}, chz+chb "
            f"{b.get('changed_bytes_per_changed_player')} B/changed player; fw "
            f"{b.get('fenwick_bytes')} B, bk {b.get('buckets_bytes')} B; tot "
            f"{b.get('totals_bytes_per_player')} B per player in it "
            f"({b.get('totals_players')} players, "
            f"{b.get('unchanged_players_with_totals')} unchanged); full zset "
            f"{f['bytes_per_player']} B/player"
        )
    if "segments" in report:
        s = report["segments"]
        print(
            f"segment: {s['bytes']} -> {s['segment_plus_index_bytes_per_player']} "
            f"B/player (+ buckets {s['buckets_bytes_per_player']})"
        )
    print()
    for name, value, target, verdict in verdicts(report):
        print(f"{name:<50}{value:>28}  target {target:<16}{verdict}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.reads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--players", type=int, default=200_000)
    p.add_argument(
        "--extra-events",
        type=int,
        default=20_000,
        help="events after the generation, one per distinct player",
    )
    p.add_argument("--points-step", type=int, default=10)
    p.add_argument("--points-max", type=int, default=1000)
    p.add_argument(
        "--rate", type=float, default=1000.0, help="offered req/s (open loop)"
    )
    p.add_argument("--seconds", type=float, default=15.0, help="per open-loop phase")
    p.add_argument("--connections", type=int, default=64, help="open-loop pool size")
    p.add_argument("--closed-seconds", type=float, default=10.0)
    p.add_argument("--closed-connections", type=int, default=8)
    p.add_argument(
        "--top-connections",
        type=int,
        default=32,
        help="closed loops of live top-100 and raw Redis ZREVRANGE",
    )
    p.add_argument("--sample", type=int, default=2000, help="approx-error sample size")
    p.add_argument("--only", default="", help="comma-separated open-loop phases")
    p.add_argument(
        "--client",
        default="lean",
        help="the open loop's HTTP client: lean (asyncio protocols, GETs encoded "
        "before the phase) or aiohttp (the client until session 16); "
        "'lean,aiohttp' runs every phase with each, alternating their order "
        "(phases keyed name@client): the generator's CPU per request A/B",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="py-spy record the API during each phase (raw files in --out)",
    )
    p.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="leave the generator's set-up heap to its collector during the phases "
        "(its full collections then show as service latency; for comparison)",
    )
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    p.add_argument("--keep-data", action="store_true")
    p.add_argument(
        "--read-auth",
        choices=("open", "token"),
        default="open",
        help="LB_READ_AUTH of the stack; token: every read carries a reader token "
        "(issue 26: read p99 with authenticated reads)",
    )
    p.add_argument(
        "--live-cache-ms",
        type=int,
        default=None,
        help="LB_LIVE_CACHE_MS for the stack (default: the service's default, 0: "
        "a cached live top list is checked against Redis on every hit)",
    )
    p.add_argument(
        "--publish",
        choices=("spark", "direct"),
        default=None,
        help="spark (the default without --layers): `lb publish` in a child "
        "process (timed); direct (the default with --layers, which needs it): "
        "write the same serving files from the bench's totals (seconds, reads only)",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=0,
        help="after g1, K more generations each one layer per board over its "
        "parent (serving/layers.py; direct publish only); the reads are measured "
        "on g<K+1> (issue 24: a chain of 5 layers)",
    )
    p.add_argument(
        "--layer-events",
        type=int,
        default=0,
        help="events (distinct players) per layer (default: players x "
        "LB_LAYERS_MAX_FRACTION's default / K, the longest chain the publisher "
        "keeps uncompacted)",
    )
    p.add_argument(
        "--compare-compacted",
        action="store_true",
        help="with --layers: then publish the same totals as one full generation "
        "(same boundary), rebase, measure the same phases again, and print both "
        "p99s and API CPU per request side by side",
    )
    p.add_argument(
        "--base",
        choices=("events", "direct"),
        default="events",
        help="events: every player's one event through the speed layer, then the "
        "publish (--publish); direct: g1 is the board season:BENCH:global alone, "
        "written from the bench's totals with no event logged (the seeds' scale, "
        "issue 24: --players 100000000); history, diff and the full-zset "
        "comparisons are not run",
    )
    p.add_argument("--publish-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.publish is None:
        args.publish = "direct" if args.layers else "spark"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.publish_child:
        publish_child()
        return 0
    if args.layers < 0 or (args.layers and args.publish != "direct"):
        print("--layers K needs K >= 0 and --publish direct", file=sys.stderr)
        return 2
    if args.base == "direct" and args.layers:
        print("--base direct takes no --layers", file=sys.stderr)
        return 2
    if args.compare_compacted and not args.layers:
        print("--compare-compacted needs --layers K >= 1", file=sys.stderr)
        return 2
    global ID_DIGITS
    ID_DIGITS = max(ID_DIGITS, len(str(args.players - 1)))
    data_dir = Path(tempfile.mkdtemp(prefix="lb-bench-reads-"))
    env = stack_env(data_dir)
    use_read_auth(env, args.read_auth)
    if args.live_cache_ms is not None:
        env["LB_LIVE_CACHE_MS"] = str(args.live_cache_ms)
    port = free_port()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = report_head(
        "reads",
        argv,
        args,
        "load generator, API (one uvicorn process) and Redis share the CPUs",
    )
    report["board"] = BOARD
    code = 0
    print(
        f"lb up --port {port}  (LB_DATA_DIR={data_dir}, LB_RATE_LIMIT=off)", flush=True
    )
    try:
        run(args, env, data_dir, port, report, stamp)
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        import traceback

        traceback.print_exc()
        print(f"bench failed: {report['error']}", file=sys.stderr)
        code = 1
        if not isinstance(exc, Exception):
            raise
    finally:
        if not stop_stack(env):
            code = 1
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
        report["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        out = args.out / f"reads-{stamp}.json"
        out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print_table(report)
        print(f"results: {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
