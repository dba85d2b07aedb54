"""Publish benchmark: synthetic bronze, run_publish phases, DuckDB reference.

    python -m bench.publish --players 100000 --events 1000000

``make bench-publish`` runs the headline shapes of issue 12 (1 M players / 10 M
events in full, then 100 k new events incremental over that history, a 2 GiB
driver: ``LB_SPARK_DRIVER_MEMORY=2g``); ``BENCH_PUBLISH_ARGS`` picks another scale,
e.g. ``make bench-publish BENCH_PUBLISH_ARGS="--players 20000 --events 200000
--incremental-events 2000"``.

1. Generates synthetic bronze directly (no Redis ingest) with the columns
   ``jobs/land.py`` writes: results, redeliveries of the same eventId (defensive),
   corrections (higher revision; some downward, some moving the match to another
   day), stale revisions (not above the stored one), late events for the season,
   points from a small range (many ties), and ``raw``, the record's JSON text,
   which the publish's landed index (jobs/landed.py) parses (these records carry
   no ``rc``, so the index is skipped, as for records logged before it).
2. Writes it as the Delta bronze table (not timed), then times ``run_publish`` with
   ``land=False`` (bronze counts as landed through its max position per partition)
   phase by phase.
3. Runs the same recompute + rank as SQL in DuckDB on the same rows (single node,
   the reference), and compares every (board, position, rank, player, score) row of
   the published gold snapshot with it.
4. Reports serving-segment bytes per (board, player) row and per player.

Results go to stdout and ``bench/results/publish-<utc>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.harness import loadavg_text
from conf.boards import load_boards, to_ms

RESULTS = Path(__file__).parent / "results"
DAY_MS = 86_400_000
T0 = to_ms(datetime(2026, 10, 25, tzinfo=UTC))
T1 = to_ms(datetime(2026, 12, 5, tzinfo=UTC))


def _strings(prefix: str, values: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(
        pa.scalar(prefix), pa.array(values.astype(str)), ""
    )


def generate(
    players: int,
    events: int,
    partitions: int,
    seed: int,
    raw: bool,
    season_cutoff_ms: int,
) -> pa.Table:
    """Synthetic bronze rows (see the module doc); positions gap-free per partition."""
    rng = np.random.default_rng(seed)
    n_res = int(events * 0.80)
    n_corr = int(events * 0.10)
    n_stale = int(events * 0.04)
    n_dup = int(events * 0.03)
    n_late = events - n_res - n_corr - n_stale - n_dup
    # Results: skewed activity (some players play a lot), one new match each.
    player = (rng.zipf(1.3, n_res) - 1) % players
    player[:players] = np.arange(min(players, n_res))  # every player plays once
    occurred = rng.integers(T0, T1, n_res)
    received = occurred + rng.integers(0, 600_000, n_res)
    points = rng.integers(0, 60, n_res)
    match = np.arange(n_res)
    event = np.arange(n_res)
    revision = np.ones(n_res, np.int64)
    # Corrections of random results: higher revision, points up or down, 15% move day.
    src = rng.integers(0, n_res, n_corr)
    c_rev = rng.integers(2, 4, n_corr)
    c_occ = occurred[src] + np.where(
        rng.random(n_corr) < 0.15, rng.integers(-3, 4, n_corr) * DAY_MS, 0
    )
    c_rec = received[src] + rng.integers(60_000, 3 * DAY_MS, n_corr)
    c_pts = np.maximum(0, points[src] + rng.integers(-30, 30, n_corr))
    # Stale: a revision not above the first one (1 or 0) under a new eventId.
    stale = rng.integers(0, n_res, n_stale)
    s_rev = rng.integers(0, 2, n_stale)
    # Redeliveries: the same (player, eventId) again (never logged by the speed layer;
    # recompute must ignore them anyway).
    dup = rng.integers(0, n_res, n_dup)
    # Late: new matches inside the season received after its cutoff.
    l_player = rng.integers(0, players, n_late)
    l_occ = season_cutoff_ms - rng.integers(2 * 3_600_000, DAY_MS, n_late)
    l_rec = season_cutoff_ms + rng.integers(1, DAY_MS, n_late)
    base = n_res + n_corr + n_stale
    cols = {
        "player": np.concatenate(
            [player, player[src], player[stale], player[dup], l_player]
        ),
        "match": np.concatenate(
            [match, match[src], match[stale], match[dup], n_res + np.arange(n_late)]
        ),
        "event": np.concatenate(
            [
                event,
                n_res + np.arange(n_corr + n_stale),
                event[dup],
                base + np.arange(n_late),
            ]
        ),
        "revision": np.concatenate(
            [revision, c_rev, s_rev, revision[dup], np.ones(n_late, np.int64)]
        ),
        "occurred": np.concatenate(
            [occurred, c_occ, occurred[stale], occurred[dup], l_occ]
        ),
        "received": np.concatenate(
            [
                received,
                c_rec,
                received[stale] + rng.integers(1, DAY_MS, n_stale),
                received[dup] + rng.integers(1, 60_000, n_dup),
                l_rec,
            ]
        ),
        "points": np.concatenate(
            [
                points,
                c_pts,
                rng.integers(0, 60, n_stale),
                points[dup],
                rng.integers(0, 60, n_late),
            ]
        ),
    }
    part = cols["player"] % partitions
    order = np.lexsort((cols["received"], part))
    cols = {k: v[order] for k, v in cols.items()}
    part = part[order]
    starts = np.searchsorted(part, np.arange(partitions))
    position = np.arange(len(part)) - starts[part] + 1
    region = np.where(cols["player"] % 3 == 0, "na", "eu")
    player_ids = _strings("p", cols["player"])
    received_us = pa.array(cols["received"] * 1000, pa.timestamp("us", tz="UTC"))
    occurred_us = pa.array(cols["occurred"] * 1000, pa.timestamp("us", tz="UTC"))
    kind = np.where(cols["revision"] > 1, "correction", "result")
    table = pa.table(
        {
            "partition": pa.array(part.astype(np.int32)),
            "position": pa.array(position.astype(np.int64)),
            "received_at": received_us,
            "received_at_ms": pa.array(cols["received"].astype(np.int64)),
            "status": pa.nulls(len(part), pa.string()),
            "event_id": _strings("e", cols["event"]),
            "player_id": player_ids,
            "match_id": _strings("m", cols["match"]),
            "source_revision": pa.array(cols["revision"].astype(np.int64)),
            "occurred_at": occurred_us,
            "region": pa.array(region),
            "points": pa.array(cols["points"].astype(np.int64)),
            "kind": pa.array(kind),
            "reason": pa.nulls(len(part), pa.string()),
            "raw": pa.nulls(len(part), pa.string()),
        }
    )
    if raw:
        text = pc.binary_join_element_wise(
            '{"partition":',
            pc.cast(table["partition"], pa.string()),
            ',"position":',
            pc.cast(table["position"], pa.string()),
            ',"event":{"eventId":"',
            table["event_id"],
            '","playerId":"',
            table["player_id"],
            '","matchId":"',
            table["match_id"],
            '","points":',
            pc.cast(table["points"], pa.string()),
            "}}",
            "",
        )
        table = table.set_column(table.schema.get_field_index("raw"), "raw", text)
    return table


# ----------------------------------------------------------------------- DuckDB ref


def duckdb_sql(seasons, window_lateness_ms: int) -> str:
    """Recompute + rank of jobs/ (and apply_event.lua) as one DuckDB query over
    ``bronze``; boundary = everything in it. A daily/weekly/monthly board ignores an
    event received after its period's end plus ``window_lateness_ms``."""
    items = []
    for s in seasons:
        start, end, cutoff = to_ms(s.start), to_ms(s.end), to_ms(s.cutoff)
        for scope in ("'global'", "region"):
            items.append(
                f"CASE WHEN occ_ms >= {start} AND occ_ms < {end} THEN "
                f"{{'board': 'season:{s.id}:' || {scope}, 'agg': '{s.aggregation}', "
                f"'cutoff': {cutoff}::BIGINT}} END"
            )

    def closes(unit: str) -> str:
        # date_trunc('week') is the ISO Monday.
        return (
            f"(epoch_ms(date_trunc('{unit}', t) + INTERVAL 1 {unit}) + "
            f"{int(window_lateness_ms)})::BIGINT"
        )

    periods = [
        ("daily", "strftime(t, '%Y-%m-%d')", closes("day")),
        ("weekly", "printf('%04d-W%02d', isoyear(t), weekofyear(t))", closes("week")),
        ("monthly", "strftime(t, '%Y-%m')", closes("month")),
        ("alltime", "'all'", "0::BIGINT"),
    ]
    for window, period, cutoff in periods:
        for scope in ("'global'", "region"):
            items.append(
                f"{{'board': '{window}:' || {period} || ':' || {scope}, "
                f"'agg': 'sum', 'cutoff': {cutoff}}}"
            )
    board_list = "list_filter([" + ", ".join(items) + "], lambda x: x IS NOT NULL)"
    return f"""
WITH first AS (
  SELECT * FROM bronze
  QUALIFY row_number() OVER (PARTITION BY player_id, event_id ORDER BY position) = 1
), prev AS (
  SELECT *, max(source_revision) OVER (
    PARTITION BY player_id, match_id ORDER BY position
    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS best_before
  FROM first
), acc AS (
  SELECT player_id, match_id, position, received_at_ms AS rms, points,
         epoch_ms(occurred_at) AS occ_ms, make_timestamp(epoch_us(occurred_at)) AS t,
         region
  FROM prev WHERE best_before IS NULL OR source_revision > best_before
), eb AS (
  SELECT player_id, match_id, position, rms, points, b.board AS board, b.agg AS agg,
         b.cutoff AS cutoff
  FROM (SELECT *, unnest({board_list}) AS b FROM acc)
), fed AS (
  SELECT DISTINCT player_id, match_id, board, agg, cutoff FROM eb
  WHERE cutoff = 0 OR rms <= cutoff
), lastpos AS (
  SELECT f.player_id, f.match_id, f.board, any_value(f.agg) AS agg,
         max(a.position) AS lp
  FROM fed f JOIN acc a ON a.player_id = f.player_id AND a.match_id = f.match_id
  WHERE f.cutoff = 0 OR a.rms <= f.cutoff
  GROUP BY f.player_id, f.match_id, f.board
), contrib AS (
  SELECT l.player_id, l.board, l.agg, coalesce(e.points, 0) AS points,
         e.board IS NULL AS removed
  FROM lastpos l LEFT JOIN eb e ON e.player_id = l.player_id
   AND e.match_id = l.match_id AND e.position = l.lp AND e.board = l.board
), totals AS (
  SELECT board, player_id,
    CASE WHEN any_value(agg) = 'max'
         THEN coalesce(max(points) FILTER (WHERE NOT removed), 0)
         ELSE sum(points) END::BIGINT AS score
  FROM contrib GROUP BY board, player_id
)
SELECT board,
  row_number() OVER (PARTITION BY board ORDER BY score DESC, player_id) AS position,
  rank() OVER (PARTITION BY board ORDER BY score DESC) AS rank,
  player_id, score
FROM totals
"""


def run_duckdb(
    source: Path, seasons, window_lateness_ms: int, threads: int
) -> tuple[float, object]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute("SET preserve_insertion_order = false")
    con.execute(
        f"CREATE VIEW bronze AS SELECT * FROM read_parquet('{source}/*.parquet')"
    )
    started = time.perf_counter()
    con.execute("CREATE TABLE ref AS " + duckdb_sql(seasons, window_lateness_ms))
    return time.perf_counter() - started, con


def compare(con, gold: pa.Table) -> dict[str, int]:
    con.register("gold_arrow", gold)
    con.execute(
        "CREATE TABLE gold AS SELECT board, position::BIGINT AS position, "
        "rank::BIGINT AS rank, player_id, score::BIGINT AS score FROM gold_arrow"
    )
    cols = "board, position, rank, player_id, score"
    only_ref = con.execute(
        f"SELECT count(*) FROM (SELECT {cols} FROM ref EXCEPT ALL "
        f"SELECT {cols} FROM gold)"
    ).fetchone()[0]
    only_gold = con.execute(
        f"SELECT count(*) FROM (SELECT {cols} FROM gold EXCEPT ALL "
        f"SELECT {cols} FROM ref)"
    ).fetchone()[0]
    rows = con.execute("SELECT count(*) FROM ref").fetchone()[0]
    return {
        "ref_rows": rows,
        "gold_rows": gold.num_rows,
        "only_in_duckdb": only_ref,
        "only_in_spark": only_gold,
    }


# ------------------------------------------------------------------------------ main


class _Progress(dict):
    """Phase timings that are also printed as they arrive (a timed-out run still
    shows how far it got)."""

    def __setitem__(self, key: str, value: float) -> None:
        super().__setitem__(key, value)
        print(f"phase {key}: {value:.2f} s, load {loadavg_text()}", flush=True)


class DriverMemory:
    """The driver JVM's memory while the benchmark runs (in local mode the tasks run
    in it too), sampled every ``interval`` s on a background thread.

    - ``heap_max_mb``: the heap limit (``-Xmx``, from ``spark.driver.memory``);
    - ``heap_used_peak_mb``: the largest heap in use at one sample (young + old
      generation together, garbage included; never above the limit);
    - ``heap_after_gc_peak_mb``: the largest heap left after a collection (the sum
      of each pool's usage after the latest GC, sampled): what the driver needs live;
    - ``rss_peak_mb``: the JVM process's peak resident set (``VmHWM``): heap in use
      plus metaspace, code cache, thread stacks, direct (Netty/Arrow) buffers: the
      machine memory the driver took;
    - ``heap_pool_peaks_sum_mb``: what earlier runs reported as ``peak_used_mb``:
      the sum of every heap pool's own peak. The pools peak at different moments
      (eden fills between collections, old gen before a mixed one), so this sum
      can exceed the limit, as the 3,4xx MB at 1 M players did with a 2,048 MB heap.
      Not a footprint; kept to compare with those runs.
    """

    def __init__(self, spark, interval: float = 0.5) -> None:
        jvm = spark.sparkContext._jvm
        self._management = jvm.java.lang.management.ManagementFactory
        self._limit = jvm.java.lang.Runtime.getRuntime().maxMemory()
        self._pid = int(jvm.java.lang.ProcessHandle.current().pid())
        self._heap_peak = 0
        self._after_gc_peak = 0
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _heap_pools(self):
        return [
            pool
            for pool in self._management.getMemoryPoolMXBeans()
            if str(pool.getType()) == "Heap memory"
        ]

    def _sample(self) -> None:
        used = self._management.getMemoryMXBean().getHeapMemoryUsage().getUsed()
        self._heap_peak = max(self._heap_peak, used)
        after = 0
        for pool in self._heap_pools():
            usage = pool.getCollectionUsage()
            after += usage.getUsed() if usage is not None else 0
        self._after_gc_peak = max(self._after_gc_peak, after)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._sample()
            except Exception:  # the JVM is stopping: keep what was sampled
                return

    def _rss_peak(self) -> int:
        for line in Path(f"/proc/{self._pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def report(self) -> dict[str, float]:
        self._sample()
        pools = sum(p.getPeakUsage().getUsed() for p in self._heap_pools())
        return {
            "heap_max_mb": round(self._limit / 2**20),
            "heap_used_peak_mb": round(self._heap_peak / 2**20),
            "heap_after_gc_peak_mb": round(self._after_gc_peak / 2**20),
            "rss_peak_mb": round(self._rss_peak() / 2**20),
            "heap_pool_peaks_sum_mb": round(pools / 2**20),
        }

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_incremental(spark, settings, boards, args, cutoff: int, source: Path) -> dict:
    """Append ``--incremental-events`` new events (the same mix, new ids, positions
    after the landed ones) and time the publish that follows (incremental)."""
    import json as _json

    from jobs.build import check_generation
    from jobs.land import bronze_path, extract_landed_through
    from jobs.publish import run_publish

    landed = extract_landed_through(spark, bronze_path(settings))
    more = generate(
        args.players,
        args.incremental_events,
        args.partitions,
        args.seed + 1,
        args.raw,  # the landed index (jobs/landed.py) parses every new record's raw
        cutoff,
    )
    offset = pa.array(
        [landed.get(int(p), 0) for p in more.column("partition").to_pylist()],
        pa.int64(),
    )
    for name, prefix in (("event_id", "x"), ("match_id", "x")):
        column = pc.binary_join_element_wise(prefix, more.column(name), "")
        more = more.set_column(more.schema.get_field_index(name), name, column)
    more = more.set_column(
        more.schema.get_field_index("position"),
        "position",
        pc.add(more.column("position"), offset),
    )
    pq.write_table(more, source.parent / "more.parquet")
    (
        spark.read.parquet(str(source.parent / "more.parquet"))
        .write.format("delta")
        .mode("append")
        .partitionBy("partition")
        .save(str(bronze_path(settings)))
    )
    timings: dict[str, float] = _Progress()
    out: dict = {"events": args.incremental_events, "load_before": loadavg_text()}
    started = time.perf_counter()
    generation = run_publish(
        settings, spark=spark, boards=boards, land=False, timings=timings
    )
    out["publish_s"] = round(time.perf_counter() - started, 2)
    out["load_after"] = loadavg_text()
    out["phases_s"] = {k: round(v, 2) for k, v in timings.items()}
    manifest = _json.loads(
        (settings.segments_dir / generation / "manifest.json").read_text()
    )
    out["build"] = {k: v for k, v in manifest["build"].items() if k != "fingerprint"}
    out["boards"] = len(manifest["boards"])
    # With LB_LAYERS_MAX_CHAIN >= 1: boards written as a layer over their parent,
    # and the gold chain (build.gold: its change rows against the base's rows).
    out["layered_boards"] = sum(
        1 for m in manifest["boards"].values() if m.get("layers")
    )
    out["layers_max_chain"] = settings.layers_max_chain
    if args.check_incremental:
        started = time.perf_counter()
        check = check_generation(settings, spark, generation, boards)
        out["check_s"] = round(time.perf_counter() - started, 2)
        out["identical_to_full"] = check.ok
        out["check"] = {
            "rows": check.rows,
            "only_in_gold": check.only_in_gold,
            "only_in_recompute": check.only_in_recompute,
            # The served segments (layered boards merged), compared row by row on
            # the driver: part of check_s since the check grew it.
            "served_differences": len(check.served_differences),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--players", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    # bronze.raw is always filled: the landed index parses every new record's raw
    # and stops at a null one (`make bench-publish` without it failed there).
    # The flag stays for the commands RESULTS records.
    ap.add_argument(
        "--raw", action="store_true", default=True, help="(always on) fill bronze.raw"
    )
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--no-duckdb", action="store_true")
    ap.add_argument("--no-compare", action="store_true")
    ap.add_argument("--duckdb-threads", type=int, default=2)
    ap.add_argument(
        "--incremental-events",
        type=int,
        default=0,
        help="then append this many new events and time the incremental publish",
    )
    ap.add_argument(
        "--check-incremental",
        action="store_true",
        help="compare the incremental generation with a full recompute (slow)",
    )
    args = ap.parse_args()

    from conf.settings import Settings
    from jobs.land import bronze_path
    from jobs.publish import run_publish
    from jobs.spark import get_spark
    from jobs.tables import GOLD_SNAPSHOTS

    boards = load_boards()
    data_dir = args.data_dir or Path(f"/tmp/lb-bench-publish-{os.getpid()}")
    shutil.rmtree(data_dir, ignore_errors=True)
    source = data_dir / "source"
    source.mkdir(parents=True)
    report: dict = {
        "command": "python -m bench.publish "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if v not in (None, False) and k not in ("keep",)
        ),
        "players": args.players,
        "events": args.events,
        "partitions": args.partitions,
        "machine": f"{platform.node()} {os.cpu_count()} cpus, "
        f"{platform.python_version()}",
        "load_start": loadavg_text(),
    }
    started = time.perf_counter()
    cutoff = to_ms(boards.seasons[0].cutoff) if boards.seasons else T1
    table = generate(
        args.players, args.events, args.partitions, args.seed, args.raw, cutoff
    )
    chunk = 2_000_000
    for i, begin in enumerate(range(0, table.num_rows, chunk)):
        pq.write_table(table.slice(begin, chunk), source / f"part-{i:04d}.parquet")
    del table
    report["generate_s"] = round(time.perf_counter() - started, 2)

    settings = Settings(
        data_dir=data_dir / "lb", partitions=args.partitions, rate_limit="off"
    )
    spark = get_spark("bench-publish")
    memory = DriverMemory(spark)
    started = time.perf_counter()
    (
        spark.read.parquet(str(source))
        .write.format("delta")
        .mode("overwrite")
        .partitionBy("partition")
        .save(str(bronze_path(settings)))
    )
    report["bronze_write_s"] = round(time.perf_counter() - started, 2)
    report["shuffle_partitions"] = spark.conf.get("spark.sql.shuffle.partitions")
    report["driver_memory"] = spark.conf.get("spark.driver.memory")

    timings: dict[str, float] = _Progress()
    report["load_before_publish"] = loadavg_text()
    started = time.perf_counter()
    generation = run_publish(
        settings, spark=spark, boards=boards, land=False, timings=timings
    )
    report["publish_s"] = round(time.perf_counter() - started, 2)
    report["load_after_publish"] = loadavg_text()
    report["driver_memory_after_publish"] = memory.report()
    report["phases_s"] = {k: round(v, 2) for k, v in timings.items()}
    report["recompute_rank_s"] = round(
        sum(
            v
            for k, v in timings.items()
            if k in ("land", "recompute_contributions", "totals", "rank_gold")
        ),
        2,
    )
    seg = settings.segments_dir / generation
    files = (
        spark.read.format("delta")
        .load(str(settings.delta_dir / GOLD_SNAPSHOTS))
        .where(f"generation = '{generation}'")
        .inputFiles()
    )
    gold = pa.concat_tables(
        [
            pq.read_table(
                f.removeprefix("file:"),
                columns=["board", "position", "rank", "player_id", "score"],
            )
            for f in files
        ]
    )
    seg_bytes = dir_bytes(seg)
    players_on_boards = len(pc.unique(gold.column("player_id")))
    report["gold_rows"] = gold.num_rows
    report["segment_bytes"] = seg_bytes
    report["segment_bytes_per_board_row"] = round(seg_bytes / max(1, gold.num_rows), 1)
    report["segment_bytes_per_player"] = round(seg_bytes / max(1, players_on_boards), 1)
    report["boards"] = len(pc.unique(gold.column("board")))

    if not args.no_duckdb:
        report["load_before_duckdb"] = loadavg_text()
        seconds, con = run_duckdb(
            source, boards.seasons, boards.window_lateness_ms, args.duckdb_threads
        )
        report["duckdb_recompute_rank_s"] = round(seconds, 2)
        report["duckdb_threads"] = args.duckdb_threads
        report["ratio_publish_to_duckdb"] = round(report["publish_s"] / seconds, 2)
        report["ratio_recompute_rank_to_duckdb"] = round(
            report["recompute_rank_s"] / seconds, 2
        )
        if not args.no_compare:
            report["compare"] = compare(con, gold)
            c = report["compare"]
            report["identical"] = c["only_in_duckdb"] == 0 and c["only_in_spark"] == 0
        con.close()
    if args.incremental_events:
        report["incremental"] = run_incremental(
            spark, settings, boards, args, cutoff, source
        )
    report["load_end"] = loadavg_text()
    report["driver_memory_end"] = memory.report()
    memory.stop()
    spark.stop()
    if not args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"publish-{stamp}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
