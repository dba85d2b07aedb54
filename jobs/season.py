"""Season lifecycle: close a season into an award snapshot, adjudicate late events,
land award versions into Delta, drop closed windows from Redis.

``close_season(settings, season_id)`` is what ``lb season close`` and the Airflow
``season_close`` DAG call. Its order of effects:

1. an existing version 1 is returned as it is (a rerun gives the same snapshot);
2. refuse before the season's close time (end + allowedLateness);
3. read every partition's last handed-out position (now, after the close time: every
   event received before the cutoff is at or below it), land (the publish's landing
   phase, ``land_inputs``), and check each partition landed through it -- otherwise
   name the partitions missing;
4. publish a final generation from that landing (``run_publish(landed=...)``: it
   does not land a second time), rebase the speed layer;
5. build version 1 from the generation's segments and silver contributions, written
   whole or not at all (``serving/awards.py``); land it into Delta ``gold_awards``;
6. audit the close; drop closed boards' speed-layer keys.

A crash anywhere before the rename in step 5 leaves no version; rerunning publishes
another generation with the same content and the same hash.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import (
    BoardsConfig,
    Season,
    board_rules,
    game_of_board,
    load_boards,
    resolve_season,
    season_board_prefix,
    split_board,
)
from conf.rule_state import effective_boards, load_rule_state
from conf.settings import Settings
from jobs.land import LandingGap, table_exists
from jobs.phase_clock import PhaseClock
from jobs.publish_lock import publish_lock
from jobs.tables import SILVER_CONTRIBUTIONS
from serving.awards import (
    AwardsError,
    AwardVersion,
    clean_partial,
    decided_events,
    rank_board,
    read_version,
    season_boards,
    versions,
    write_version,
)
from serving.layers import compacted, load_board
from serving.registry import GenerationRegistry
from speed.audit import record_audit_sync
from speed.closed import drop_closed_windows
from speed.connection import sync_client
from speed.late_review import adjudicate, late_review_key, pending_late
from speed.partitions import Keys
from speed.server import resolve_redis_url

GOLD_AWARDS = "gold_awards"

AWARDS_ROW_SCHEMA = T.StructType(
    [
        T.StructField("season", T.StringType(), False),
        T.StructField("version", T.LongType(), False),
        T.StructField("board", T.StringType(), False),
        T.StructField("position", T.LongType(), False),
        T.StructField("rank", T.LongType(), False),
        T.StructField("player_id", T.StringType(), False),
        T.StructField("score", T.LongType(), False),
        T.StructField("tier", T.StringType(), True),
        T.StructField("generation", T.StringType(), False),
        T.StructField("hash", T.StringType(), False),
        T.StructField("closed_at", T.TimestampType(), False),
        # The season's game (API.md "Games"; season and board are internal ids,
        # ``arena~S4``). Rows landed before games have none: the game default's.
        T.StructField("game", T.StringType(), True),
    ]
)


class SeasonError(RuntimeError):
    """The season cannot be closed or adjudicated as asked (message says why)."""


@dataclass(frozen=True)
class AwardSnapshot:
    """What a close or an adjudication produced."""

    season: str
    version: int
    generation: str
    hash: str
    closed_at: str
    boards: dict[str, int]
    changes: list[dict[str, Any]]

    @classmethod
    def of(cls, version: AwardVersion) -> AwardSnapshot:
        meta = version.meta
        return cls(
            season=version.season,
            version=version.version,
            generation=version.generation,
            hash=version.hash,
            closed_at=meta["closedAt"],
            boards={b: int(v["population"]) for b, v in meta["boards"].items()},
            changes=list(meta.get("changes") or []),
        )


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"


def _season(config: BoardsConfig, season_id: str) -> Season:
    """The season of an internal season id (``<game>~S4`` for another game's,
    :func:`conf.boards.resolve_season`)."""
    season = resolve_season(config, season_id)
    if season is None:
        own, _ = game_of_board(config, season_id)
        known = ", ".join(s.id for s in (own or config).seasons) or "none"
        raise SeasonError(
            f"no season {season_id!r} in the boards file (known: {known})"
        )
    return season


# ------------------------------------------------------------------ Delta landing


def land_awards(settings: Settings, spark: SparkSession) -> int:
    """Append every award version not yet in ``gold_awards``; returns rows added.

    Idempotent per version (``txnAppId = awards-<season>``, ``txnVersion`` = N), so
    a version written by the API (which has no Spark) lands on the next publish.
    """
    root = settings.data_dir / "awards"
    if not root.is_dir():
        return 0
    path = settings.delta_dir / GOLD_AWARDS
    landed: set[tuple[str, int]] = set()
    if table_exists(path):
        landed = {
            (r[0], int(r[1]))
            for r in spark.read.format("delta")
            .load(str(path))
            .select("season", "version")
            .distinct()
            .collect()
        }
    added = 0
    boards = load_boards(settings.boards_file)
    for season_id in sorted(os.listdir(root)):
        for number in versions(settings.data_dir, season_id):
            if (season_id, number) in landed:
                continue
            version = read_version(settings.data_dir, season_id, number)
            assert version is not None
            added += _land_version(spark, path, version, boards)
    return added


def _land_version(
    spark: SparkSession, path: Path, version: AwardVersion, boards: BoardsConfig
) -> int:
    """Append one award version to ``gold_awards`` with real scores (the snapshot
    holds oriented ones, conf/boards.py BoardRules)."""
    closed = datetime.fromisoformat(version.meta["closedAt"].replace("Z", "+00:00"))
    game = split_board(version.season)[0]
    tables = []
    for board in sorted(version.meta["boards"]):
        table = version.board(board)
        if table is None or table.num_rows == 0:
            continue
        n = table.num_rows
        tables.append(
            pa.table(
                {
                    "season": pa.array([version.season] * n, pa.string()),
                    "version": pa.array([version.version] * n, pa.int64()),
                    "board": pa.array([board] * n, pa.string()),
                    "position": table.column("position"),
                    "rank": table.column("rank"),
                    "player_id": table.column("player_id"),
                    "score": pc.multiply(
                        table.column("score"), board_rules(boards, board).sign
                    ),
                    "tier": table.column("tier"),
                    "generation": pa.array([version.generation] * n, pa.string()),
                    "hash": pa.array([version.hash] * n, pa.string()),
                    "closed_at": pa.array([closed] * n, pa.timestamp("us", tz="UTC")),
                    "game": pa.array([game] * n, pa.string()),
                }
            )
        )
    with tempfile.TemporaryDirectory(prefix="awards-") as tmp:
        if tables:
            pq.write_table(pa.concat_tables(tables), f"{tmp}/rows.parquet")
            frame = spark.read.schema(AWARDS_ROW_SCHEMA).parquet(tmp)
        else:
            frame = spark.createDataFrame([], AWARDS_ROW_SCHEMA)
        (
            frame.write.format("delta")
            .mode("append")
            .partitionBy("season")
            # A table landed before games gains the ``game`` column.
            .option("mergeSchema", "true")
            .option("txnAppId", f"awards-{version.season}")
            .option("txnVersion", version.version)
            .save(str(path))
        )
    return sum(t.num_rows for t in tables)


# ------------------------------------------------------------------------ close


def _handed_out(client: redis.Redis, partitions: int) -> dict[int, int]:
    pipe = client.pipeline(transaction=False)
    for partition in range(partitions):
        pipe.get(Keys(partition).position)
    return {p: int(v or 0) for p, v in enumerate(pipe.execute())}


def _contributions(
    spark: SparkSession, settings: Settings, generation: str, season: Season
) -> pa.Table:
    path = settings.delta_dir / SILVER_CONTRIBUTIONS
    columns = ["player_id", "match_id", "board", "points", "removed", "position"]
    if not table_exists(path):
        return (
            pa.table({c: pa.array([], pa.string()) for c in columns[:3]})
            .append_column("points", pa.array([], pa.int64()))
            .append_column("removed", pa.array([], pa.bool_()))
            .append_column("position", pa.array([], pa.int64()))
        )
    frame = (
        spark.read.format("delta")
        .load(str(path))
        .where(F.col("board").startswith(season_board_prefix(season.id)))
    )
    seen = {r[0] for r in frame.select("generation").distinct().collect()}
    if seen - {generation}:
        raise SeasonError(
            f"silver holds generation(s) {sorted(seen)} instead of {generation}: "
            "another publish ran during the close; run the close again"
        )
    with tempfile.TemporaryDirectory(prefix="close-") as tmp:
        frame.select(*columns).coalesce(1).write.parquet(f"{tmp}/c")
        return pq.read_table(f"{tmp}/c")


def close_season(
    settings: Settings,
    season_id: str,
    *,
    spark: SparkSession | None = None,
    boards: BoardsConfig | None = None,
    now: datetime | None = None,
    fail_at: str | None = None,
    timings: dict[str, float] | None = None,
) -> AwardSnapshot:
    """Close a season: final generation plus immutable award snapshot version 1.

    ``fail_at`` is a test hook: ``"after_publish"`` or ``"before_rename"`` raise
    :class:`SeasonError` at that step, as a crash would stop there. ``timings``, when
    given, receives the wall-clock seconds of each step (``publish: <phase>`` for
    the final publish's own phases).

    :raises SeasonError: unknown season, before its close time, incomplete landing.
    :raises PublishBusy: another publish holds the data dir's publish lock
        (``lb`` exits 5, busy).
    """
    # A promoted season (lb replay --promote) closes under its rule now: the awards
    # record the rule the generation scored it under.
    config = effective_boards(
        boards or load_boards(settings.boards_file), load_rule_state(settings.data_dir)
    )
    season = _season(config, season_id)
    existing = read_version(settings.data_dir, season.id, 1)
    if existing is not None:
        if spark is not None:
            land_awards(settings, spark)
        return AwardSnapshot.of(existing)
    moment = now or datetime.now(UTC)
    if moment <= season.cutoff:
        raise SeasonError(
            f"season {season.id} closes at {season.cutoff.isoformat()} (end "
            f"{season.end.isoformat()} + allowedLateness); it is "
            f"{moment.isoformat(timespec='seconds')} now"
        )
    if spark is None:
        from jobs.spark import get_spark

        spark = get_spark("season-close")
    from jobs.publish import land_inputs, run_publish
    from speed.rebase import rebase_published

    clock = PhaseClock(timings)
    with publish_lock(settings):
        clean_partial(settings.data_dir, season.id)
        client = sync_client(resolve_redis_url(settings))
        try:
            handed = _handed_out(client, settings.partitions)
            try:
                # The publish's own landing phase, run once here: its boundary is
                # checked, then handed to the final publish (which lands no more).
                landed = land_inputs(settings, spark)
            except LandingGap as exc:
                # Positions handed out that the log no longer (or never) holds: the
                # same verdict as a short landing, named the same way.
                raise SeasonError(f"incomplete: {exc}") from exc
            through = landed.boundary
            missing = {
                p: (through.get(p, 0), handed[p])
                for p in handed
                if through.get(p, 0) < handed[p]
            }
            clock.lap("land + completeness check")
            if missing:
                raise SeasonError(
                    "incomplete: "
                    + "; ".join(
                        f"partition {p} landed through {got}, positions up to {want} "
                        "were handed out after the close time"
                        for p, (got, want) in sorted(missing.items())
                    )
                )
            # Full: the award reads silver stamped with this generation only.
            phases: dict[str, float] = {}
            generation_id = run_publish(
                settings,
                spark=spark,
                boards=config,
                full=True,
                timings=phases,
                landed=landed,
            )
            clock.lap("final publish")
            if timings is not None:
                timings.update({f"  publish: {k}": v for k, v in phases.items()})
            rebase_published(settings, generation_id)
            clock.lap("rebase")
            if fail_at == "after_publish":
                raise SeasonError("aborted after the final generation (test hook)")
            registry = GenerationRegistry(
                settings.segments_dir, settings.retained_generations
            )
            registry.refresh(force=True)
            generation = registry.get(generation_id)
            short = {
                p: pos
                for p, pos in handed.items()
                if generation.boundary.get(str(p), 0) < pos
            }
            if short:
                raise SeasonError(f"final generation boundary misses positions {short}")
            tables: dict[str, pa.Table] = {}
            for board in season_boards(config, season):
                meta = generation.manifest.get("boards", {}).get(board)
                if meta is None:
                    continue
                # The merged board (a layered one's base with its layers):
                # award snapshots are full.
                players, scores, achieved, _ = compacted(
                    load_board(generation.directory, board, meta)
                )
                tables[board] = rank_board(players, scores, season, achieved)
            clock.lap("rank award boards")
            contributions = _contributions(spark, settings, generation_id, season)
            clock.lap("read silver contributions")
            version = write_version(
                settings.data_dir,
                season,
                1,
                tables,
                contributions,
                generation=generation_id,
                boundary=generation.boundary,
                closed_at=moment,
                fail_before_rename=fail_at == "before_rename",
            )
            clock.lap("write award snapshot")
            land_awards(settings, spark)
            clock.lap("land gold_awards")
            record_audit_sync(
                client,
                cli_actor(),
                "season.close",
                f"season:{season.id}",
                None,
                {"version": 1, "generation": generation_id, "hash": version.hash},
            )
        finally:
            client.close()
    drop_closed_windows(settings, config)
    clock.lap("drop closed windows")
    return AwardSnapshot.of(version)


# ----------------------------------------------------------------- late review


def late_records_sync(
    client: redis.Redis, settings: Settings, season_id: str
) -> list[dict[str, Any]]:
    """Every record held for the season's review: the log tails first (not landed
    yet), then the queue landing copied (a record leaves the log only after it is
    in the queue, so reading in this order misses none)."""
    records: list[dict[str, Any]] = []
    for partition in range(settings.partitions):
        keys = Keys(partition)
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
            keys.log, min="-", max="+"
        )
        records += [orjson.loads(fields[b"r"]) for _, fields in entries]
    queued: dict[bytes, bytes] = client.hgetall(late_review_key(season_id))  # type: ignore[assignment]
    records += [orjson.loads(raw) for raw in queued.values()]
    decided = decided_events(settings.data_dir, season_id)
    return [dict(r) for r in pending_late(records, season_id, decided)]


def adjudicate_season(
    settings: Settings,
    season_id: str,
    accept: list[str],
    reject: list[str],
    reason: str,
    *,
    actor: str | None = None,
    spark: SparkSession | None = None,
    boards: BoardsConfig | None = None,
) -> AwardSnapshot:
    """``lb season adjudicate``: version N + 1, audited, landed into Delta."""
    # A promoted season (lb replay --promote) closes under its rule now: the awards
    # record the rule the generation scored it under.
    config = effective_boards(
        boards or load_boards(settings.boards_file), load_rule_state(settings.data_dir)
    )
    season = _season(config, season_id)
    if read_version(settings.data_dir, season.id) is None:
        raise SeasonError(f"season {season.id} is not closed (no award snapshot)")
    who = actor or cli_actor()
    client = sync_client(resolve_redis_url(settings))
    try:
        pending = late_records_sync(client, settings, season.id)
        try:
            version = adjudicate(
                settings.data_dir, config, season, pending, accept, reject, reason, who
            )
        except AwardsError as exc:
            raise SeasonError(str(exc)) from None
        record_audit_sync(
            client,
            who,
            "adjudication",
            f"season:{season.id}",
            reason,
            {
                "version": version.version,
                "accept": sorted(accept),
                "reject": sorted(reject),
                "hash": version.hash,
                "changes": len(version.meta.get("changes") or []),
            },
        )
    finally:
        client.close()
    if spark is not None:
        land_awards(settings, spark)
    return AwardSnapshot.of(version)
