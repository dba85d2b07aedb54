"""Verify served answers against an offline computation in Spark (``lb verify``).

For every board (or one), the served answers -- read from the API's own read
service, in process -- are compared with a slow offline computation from the Delta
bronze table:

* snapshot: the latest generation's answers (``mode=snapshot``) against totals
  recomputed from bronze up to the generation's boundary;
* live: the live answers against totals recomputed from bronze plus the Redis log, up
  to the positions the answers name in ``asOf``.

Checked per board: the top 100 display positions, N sampled players (fixed seed per
run id, so a run can be repeated), and the players at each award-tier boundary (the
last position inside a tier and the first outside) where the board has tiers. The
offline rank is a plain window rank over a full sort of the board (not the publisher's
rank code), so one bug cannot hide in both.

Each run appends one row to the Delta table ``ops_verify_runs`` and writes the last
result to ``$LB_DATA_DIR/run/verify.json`` (:mod:`serving.verify_state`, read by
``/metrics`` and ``lb status``).

The served side comes in as a :class:`ServedReads`: the batch layer may not import
the API (the layering test holds ``jobs`` and ``api`` apart), so the caller on top
of both -- ``lb verify``, the ``verify_generation`` DAG -- builds the API's read
service without HTTP (``api.served.served_reads``) and hands it in. The check
still reads what a client is served (the read service's modes, fallbacks and
caches), not the segments or Redis underneath it.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import (
    DEFAULT_GAME,
    BoardsConfig,
    Season,
    load_boards,
    qualify,
    resolve_season,
    split_board,
)
from conf.rule_state import effective_boards, load_rule_state, namespace_seasons
from conf.rules import RuleRegistry, default_registry
from conf.settings import Settings
from jobs.land import bronze_path, table_exists, transform_records
from jobs.rank import asc_boards
from jobs.recompute import transform_achieved, transform_recompute
from jobs.shadow import extract_shadowed, transform_public
from jobs.spark import get_spark
from serving import verify_state as serving_verify_state
from serving.registry import Generation
from speed.connection import sync_client
from speed.partitions import Keys
from speed.server import resolve_redis_url

VERIFY_RUNS = "ops_verify_runs"
TOP = 100
LIVE_ATTEMPTS = 5

RUNS_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType(), False),
        T.StructField("started_at", T.TimestampType(), False),
        T.StructField("finished_at", T.TimestampType(), False),
        T.StructField("generation", T.StringType(), True),
        T.StructField("boards", T.ArrayType(T.StringType()), False),
        T.StructField("checked", T.LongType(), False),
        T.StructField("divergence_count", T.LongType(), False),
        T.StructField("divergences", T.ArrayType(T.StringType()), False),
        T.StructField("live_as_of", T.MapType(T.StringType(), T.LongType()), True),
        T.StructField("ok", T.BooleanType(), False),
    ]
)


class ServedReads(Protocol):
    """The served answers, as the API's read service gives them: the JSON body a
    client would get, None for a 404 (``api.served.ServedReads`` is one)."""

    def latest_generation(self) -> Generation | None: ...

    def top(
        self, board: str, limit: int, generation: str | None = None
    ) -> dict[str, Any] | None: ...

    def player(
        self, board: str, player: str, generation: str | None = None
    ) -> dict[str, Any] | None: ...

    def awards(
        self, board: str, cursor: str | None = None, limit: int = 1000
    ) -> dict[str, Any] | None: ...


@dataclass
class VerifyResult:
    run_id: str
    started_at: str
    finished_at: str
    generation: str | None
    boards: list[str]
    checked: int
    divergences: list[str] = field(default_factory=list)
    live_as_of: dict[str, int] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.divergences


# ------------------------------------------------------------------ offline side


def extract_log_records(
    spark: SparkSession, settings: Settings, after: Mapping[int, int]
) -> DataFrame:
    """Unlanded Redis log records (position > ``after``) as bronze rows."""
    client = sync_client(resolve_redis_url(settings))
    lines: list[tuple[str]] = []
    try:
        for partition in range(settings.partitions):
            start = after.get(partition, 0)
            entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
                Keys(partition).log, min=f"({start}-0" if start else "-", max="+"
            )
            lines += [(fields[b"r"].decode(),) for _, fields in entries]
    finally:
        client.close()
    text = T.StructType([T.StructField("value", T.StringType())])
    return transform_records(spark.createDataFrame(lines, text))


def extract_events(spark: SparkSession, settings: Settings) -> DataFrame:
    """Every log record: landed (bronze) and not yet landed (Redis log)."""
    path = bronze_path(settings)
    landed: dict[int, int] = {}
    if table_exists(path):
        bronze = spark.read.format("delta").load(str(path))
        landed = {
            int(r[0]): int(r[1])
            for r in bronze.groupBy("partition").agg(F.max("position")).collect()
        }
    tail = extract_log_records(spark, settings, landed)
    if not table_exists(path):
        return tail
    return bronze.unionByName(tail, allowMissingColumns=True)


def transform_offline_ranks(
    totals: DataFrame, unique_boards: Iterable[str] = (), asc: Column | None = None
) -> DataFrame:
    """Display position and competition rank per board by a full window sort.

    ``achieved_ms`` (first_achieved boards, when present) orders equal scores before
    the player id; on ``unique_boards`` (``rank: unique``) the rank is the position;
    where ``asc`` (jobs/rank.py ``asc_boards``) lower scores are better.
    """
    better = (
        F.col("score").desc()
        if asc is None
        else F.when(asc, -F.col("score")).otherwise(F.col("score")).desc()
    )
    achieved = (
        F.coalesce(F.col("achieved_ms"), F.lit(0))
        if "achieved_ms" in totals.columns
        else F.lit(0)
    )
    order = Window.partitionBy("board").orderBy(
        better, achieved.asc(), F.col("player_id").asc()
    )
    by_score = Window.partitionBy("board").orderBy(better)
    whole = Window.partitionBy("board")
    position = F.row_number().over(order)
    rank = F.rank().over(by_score)
    unique = sorted(unique_boards)
    if unique:
        rank = F.when(F.col("board").isin(unique), position).otherwise(rank)
    return totals.select(
        "board",
        "player_id",
        "score",
        position.alias("position"),
        rank.alias("rank"),
        F.count(F.lit(1)).over(whole).alias("population"),
    )


@dataclass
class Offline:
    """The offline answers of one board that a run compares."""

    population: int
    top: list[tuple[int, int, str, int]]  # position, rank, player, score
    players: dict[str, tuple[int, int, int]]  # player -> position, rank, score


def tier_positions(config: BoardsConfig, board: str, population: int) -> set[int]:
    """Last position inside and first outside each award tier of a season board."""
    game, bare = split_board(board)
    if not bare.startswith("season:") or population == 0:
        return set()
    season = resolve_season(config, qualify(game, bare.split(":")[1]))
    tiers = getattr(season, "tiers", None) or []
    positions: set[int] = set()
    for tier in tiers:
        top = getattr(tier, "top", None)
        percent = getattr(tier, "top_percent", None) or getattr(
            tier, "topPercent", None
        )
        if top:
            last = int(top)
        elif percent:
            # A tier holds rank r when 100 * r <= percent * population.
            last = math.floor(population * float(percent) / 100)
        else:
            continue
        positions |= {p for p in (last, last + 1) if 1 <= p <= population}
    return positions


def compute_offline(
    spark: SparkSession,
    events: DataFrame,
    boundary: Mapping[int, int],
    config: BoardsConfig,
    boards: list[str],
    sample: int,
    seed: int,
    shadowed: Iterable[str] = (),
    registry: RuleRegistry | None = None,
    replays: Iterable[Season] = (),
) -> dict[str, Offline]:
    """``shadowed`` players are left out, as every public answer leaves them out;
    ``replays`` are the namespace seasons of registered replays (conf/rule_state)."""
    lateness = config.window_lateness_ms
    _, totals = transform_recompute(
        events,
        boundary,
        [*config.seasons, *replays],
        window_lateness_ms=lateness,
        window_rule=config.rule,
        registry=registry,
        boards=config,
    )
    totals = transform_public(totals, shadowed)
    achieved = transform_achieved(events, boundary, config.seasons, lateness, config)
    if achieved is not None:
        totals = totals.join(achieved, ["board", "player_id"], "left")
    unique = [
        qualify(game, f"season:{s.id}:{scope}")
        for game, own in config.each_game()
        for s in own.seasons
        if s.rank == "unique"
        for scope in own.scopes
    ]
    ranked = transform_offline_ranks(
        totals.where(F.col("board").isin(boards)), unique, asc_boards(config)
    ).cache()
    try:
        populations = {
            r["board"]: int(r["n"])
            for r in ranked.groupBy("board").agg(F.count(F.lit(1)).alias("n")).collect()
        }
        rng = random.Random(seed)
        wanted: list[tuple[str, int]] = []
        for board in boards:
            population = populations.get(board, 0)
            positions = set(range(1, min(TOP, population) + 1))
            positions |= set(
                rng.sample(range(1, population + 1), min(sample, population))
            )
            positions |= tier_positions(config, board, population)
            wanted += [(board, p) for p in sorted(positions)]
        schema = T.StructType(
            [
                T.StructField("board", T.StringType()),
                T.StructField("position", T.IntegerType()),
            ]
        )
        picks = spark.createDataFrame(wanted, schema)
        rows = ranked.join(picks, ["board", "position"]).collect()
    finally:
        ranked.unpersist()
    out = {b: Offline(populations.get(b, 0), [], {}) for b in boards}
    for r in sorted(rows, key=lambda r: (r["board"], r["position"])):
        item = out[r["board"]]
        entry = (int(r["position"]), int(r["rank"]), r["player_id"], int(r["score"]))
        if entry[0] <= TOP:
            item.top.append(entry)
        item.players[r["player_id"]] = (entry[0], entry[1], entry[3])
    return out


# ------------------------------------------------------------------ served side


NOT_FOUND: dict[str, Any] = {"entries": [], "population": 0}


def _compare_board(
    label: str,
    board: str,
    offline: Offline,
    served_reads: ServedReads,
    generation: str | None,
    as_of: dict[str, int] | None,
) -> tuple[int, list[str]]:
    """Compare one board's served answers (of ``generation``, live when None) with
    offline."""
    found: list[str] = []
    checked = 0
    top = served_reads.top(board, TOP, generation) or NOT_FOUND
    if as_of is not None and top.get("asOf") != as_of:
        return 0, []  # the board moved since the live reads began: skipped
    served = [
        (e["position"], e["rank"], e["playerId"], e["score"])
        for e in top.get("entries", [])
    ]
    checked += 1
    if top.get("population", 0) != offline.population:
        found.append(
            f"{label} {board}: population served {top.get('population')} "
            f"offline {offline.population}"
        )
    for i in range(max(len(served), len(offline.top))):
        have = served[i] if i < len(served) else None
        want = offline.top[i] if i < len(offline.top) else None
        if have != want:
            found.append(
                f"{label} {board} top position {i + 1}: served "
                f"{_fmt(have)} offline {_fmt(want)}"
            )
    for player, (position, rank, score) in sorted(offline.players.items()):
        if position <= TOP:
            continue  # checked with the top list
        body = served_reads.player(board, player, generation) or NOT_FOUND
        checked += 1
        if as_of is not None and body.get("asOf") != as_of:
            continue
        have2 = (body.get("position"), body.get("rank"), body.get("score"))
        if have2 != (position, rank, score):
            found.append(
                f"{label} {board} player {player}: served position/rank/score "
                f"{have2} offline {(position, rank, score)}"
            )
    return checked, found


def _fmt(entry: tuple[int, int, str, int] | None) -> str:
    if entry is None:
        return "nothing"
    position, rank, player, score = entry
    return f"{player} (rank {rank}, score {score})"


def run_verify(
    settings: Settings,
    served: ServedReads,
    *,
    spark: SparkSession | None = None,
    board: str | None = None,
    sample: int = 100,
    seed: int | None = None,
    game: str = DEFAULT_GAME,
) -> VerifyResult:
    """Compare served snapshot and live answers with the offline computation, on
    the boards of ``game`` (``board``: one of them, as the game names it)."""
    if spark is None:
        spark = get_spark("verify")
    # Promoted seasons score under their new rule, as the publisher computes them.
    rule_state = load_rule_state(settings.data_dir)
    config = effective_boards(load_boards(settings.boards_file), rule_state)
    rules = default_registry(settings.points_min, settings.points_max)
    started = datetime.now(UTC)
    run_id = uuid.uuid4().hex[:12]
    seed = seed if seed is not None else int(run_id, 16) % (2**31)
    result = VerifyResult(run_id, started.isoformat(), "", None, [], 0)

    generation = served.latest_generation()
    if generation is None:
        result.notes.append("no generation published: nothing to verify")
        return _finish(spark, settings, result)
    result.generation = generation.id
    boards = (
        [qualify(game, board)]
        if board
        else sorted(
            name for name in generation.board_names() if split_board(name)[0] == game
        )
    )
    result.boards = boards
    events = extract_events(spark, settings)

    # Snapshot: the generation's boundary.
    boundary = {int(p): int(v) for p, v in generation.boundary.items()}
    # The generation left out the players shadowed when it was published.
    hidden = {
        player
        for name in generation.board_names()
        for player in (getattr(generation.board(name), "hidden", None) or {})
    }
    replays = namespace_seasons(config, rule_state)
    offline = compute_offline(
        spark,
        events,
        boundary,
        config,
        boards,
        sample,
        seed,
        hidden,
        rules,
        replays,
    )
    for name in boards:
        label = f"snapshot {generation.id}"
        checked, found = _compare_board(
            label, name, offline[name], served, generation.id, None
        )
        result.checked += checked
        result.divergences += found

    # Live: the positions the live answers name; the same for every board, or
    # the board moved meanwhile and is read again.
    for _ in range(LIVE_ATTEMPTS):
        first = served.top(boards[0], 1) or NOT_FOUND
        as_of = {str(k): int(v) for k, v in (first.get("asOf") or {}).items()}
        if first.get("basis") != "live":
            result.notes.append(f"live layer answered {first.get('basis')!r}")
            break
        live_boundary = {int(p): v for p, v in as_of.items()}
        offline_live = compute_offline(
            spark,
            extract_events(spark, settings),
            live_boundary,
            config,
            boards,
            sample,
            seed,
            extract_shadowed(settings),
            rules,
            replays,
        )
        found_all: list[str] = []
        checked_all = 0
        moved = False
        for name in boards:
            checked, found = _compare_board(
                "live", name, offline_live[name], served, None, as_of
            )
            if checked == 0:
                moved = True
                break
            checked_all += checked
            found_all += found
        if moved:
            continue
        result.live_as_of = as_of
        result.checked += checked_all
        result.divergences += found_all
        break
    else:
        result.notes.append("live layer kept moving: live answers not compared")
    return _finish(spark, settings, result)


def _finish(
    spark: SparkSession, settings: Settings, result: VerifyResult
) -> VerifyResult:
    finished = datetime.now(UTC)
    result.finished_at = finished.isoformat()
    load_run(spark, settings, result, finished)
    write_last_verify(settings, result)
    return result


def write_last_verify(settings: Settings, result: VerifyResult) -> None:
    """The last run's result for /metrics and lb status (serving/verify_state.py)."""
    body = {
        **asdict(result),
        "ok": result.ok,
        "divergenceCount": len(result.divergences),
    }
    serving_verify_state.write_last_verify(settings, body)


def load_run(
    spark: SparkSession, settings: Settings, result: VerifyResult, finished: datetime
) -> None:
    """Append the run's row to ``ops_verify_runs``."""
    row = (
        result.run_id,
        datetime.fromisoformat(result.started_at),
        finished,
        result.generation,
        result.boards,
        int(result.checked),
        len(result.divergences),
        result.divergences,
        result.live_as_of,
        result.ok,
    )
    settings.delta_dir.mkdir(parents=True, exist_ok=True)
    (
        spark.createDataFrame([row], RUNS_SCHEMA)
        .write.format("delta")
        .mode("append")
        .save(str(settings.delta_dir / VERIFY_RUNS))
    )


def describe(result: VerifyResult) -> Iterable[str]:
    yield (
        f"verify {result.run_id}: generation {result.generation}, "
        f"{len(result.boards)} boards, {result.checked} answers checked, "
        f"{len(result.divergences)} divergences"
    )
    for note in result.notes:
        yield f"note: {note}"
    for line in result.divergences:
        yield f"DIVERGENCE {line}"
