"""Incremental publish: recompute only the players the log's delta touched.

Every rule of the recompute (first acceptance per (player, eventId), revision
acceptance per (player, match), held/released quarantine records, the boards of an
event, per-board cutoffs, ``sum``/``max`` totals, first-achieved times) is a function
of ONE player's log records. A player with no record after the previous boundary has
exactly the same records up to the new boundary as up to the previous one, so its
contributions and totals are those already in silver. The incremental build

1. reads the log's delta (``prev boundary < position <= new boundary``, partition
   pruning and file skipping on position: :func:`transform_between_boundaries`);
2. takes the (player, match) pairs it touches (and those of held records a delta
   ``released`` record releases) and reads only their records plus the records
   sharing a (player, eventId) with them (jobs/incremental_pairs.py): a
   contribution depends on nothing else of the player's history;
3. re-derives those pairs' contributions with the same transforms as the full
   recompute (``transform_recompute``); ``sum`` totals of the touched (board,
   player) keys are the old total minus the pairs' old rows plus their new ones,
   ``max`` totals re-aggregate the other pairs' silver rows with the new ones, and
   first-achieved times (``transform_achieved``) replay the whole history of the
   touched players on ``first_achieved`` boards only;
4. replaces in ``silver_contributions`` only the rows of the (player, match) pairs
   the delta has records of (and of a held record a delta ``released`` record lets
   count), and in ``silver_totals`` the rows of those pairs' players (the (board,
   player) keys of the pairs' old and new contributions re-derived, the players'
   other rows appended again as they were: a ``DELETE`` by a condition on the
   player costs less than a ``MERGE`` joining the keys, which read the table
   three times); silver has deletion vectors, so a delete writes about the rows
   it removes instead of every file holding a touched player;
5. with layering on (LB_LAYERS_MAX_CHAIN >= 1) writes gold as the changed rows
   only (``gold_changes``: the scope's keys and those of a player whose shadow
   flag changed, with their new totals or ``removed``) over the previous
   generation's, until the chain passes a limit (:func:`next_gold_chain`); else
   re-ranks only the boards of those totals and copies the other boards' gold
   rows from the previous generation. The segments phase then rewrites the
   touched boards (from the changes when gold is layered) and hard-links the
   others' files (immutable, same bytes, same checksums).

The previous state is used only when it is valid: the previous generation was built
under the same configuration (the ``fingerprint`` in its manifest: boards, promoted
rules, replays, points range, bucket target, :data:`BUILD_VERSION`), silver has not
been written since (its Delta versions equal the ones the manifest recorded), the new
boundary is at or past the previous one everywhere, and the previous generation's
segment directory is on disk. Otherwise the publish is full.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import reduce
from operator import and_, or_
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from conf.boards import DEFAULT_GAME, GAME_SEP, BoardsConfig, Season
from conf.settings import Settings
from jobs.incremental_pairs import (
    ON_SCOPE,
    PAIR,
    timed_players,
    transform_earlier_pairs,
    transform_in_scope,
    transform_pair_sources,
    transform_scope_boards,
    transform_scope_totals,
    transform_sum_totals,
    transform_touched_pairs,
)
from jobs.phase_clock import PhaseClock
from jobs.quarantine import (
    collect_histogram,
    save_histogram,
    transform_histogram_change,
)
from jobs.rank import asc_boards
from jobs.recompute import (
    NARROW,
    transform_achieved,
    transform_between_boundaries,
    transform_within_boundary,
    with_achieved,
    with_game,
)
from jobs.spark import materialize
from jobs.table_versions import table_versions
from jobs.tables import (
    DELETION_VECTORS,
    GOLD_CHANGES,
    GOLD_COLUMNS,
    GOLD_SNAPSHOTS,
    SILVER_CONTRIBUTIONS,
    SILVER_STATS_COLUMNS,
    SILVER_TOTALS,
    STATS_COLUMNS,
    drop_crashed_rows,
    game_column,
    gold_chain,
    load_gold_changes,
    load_gold_snapshot,
)
from jobs.versions import transform_versions
from serving.layers import chain_files, compact_board, is_layered
from serving.manifest import generation_number

if TYPE_CHECKING:
    from jobs.build import RecomputeInputs

# Bump whenever silver's layout or a rule's code changes: a previous state built
# by other code is then never reused.
BUILD_VERSION = 2
BUILDS_DIR = "builds"
MODE_FULL = "full"
MODE_INCREMENTAL = "incremental"

# Layered gold compacts when its chain's change rows pass this fraction of the
# base's rows (or the chain LB_LAYERS_MAX_CHAIN layers). Writing a layer costs its
# own rows and a compaction ranks every row, so a layer is the cheaper write
# until the chain outgrows the base; only ``lb verify``, replays and analysts'
# queries read the chain (each re-ranks base + chain), never the API. Serving
# layers, which every read merges, keep LB_LAYERS_MAX_FRACTION (0.25): at the
# bench's 10 % shape the changes touch a third of the players, so gold would
# compact every time under it.
GOLD_MAX_FRACTION = 1.0

CONTRIBUTION_KEYS = ("player_id", "match_id", "board")
TOTAL_KEYS = ("board", "player_id")


@dataclass(slots=True)
class Build:
    """How a generation was built; recorded in its manifest (``build``)."""

    mode: str
    fingerprint: str
    base: str | None = None  # the previous generation an incremental build extends
    # Boards re-ranked and rewritten (None: all of them, a full build).
    touched_boards: list[str] | None = None
    touched_players: int | None = None
    # Log records the incremental build re-derived contributions from.
    rederived_records: int | None = None
    # The shadowed players the ranking left out: the segments phase takes the
    # hidden rows of the rewritten boards from silver by player (none when it is
    # empty) instead of comparing all of their silver totals with gold. None in a
    # build saved by older code.
    shadowed: list[str] | None = None
    # Layered gold (jobs/tables.py): {"base", "layers", "rows", "baseRows"}: the
    # full generation the chain starts from, the layered generations since (this
    # one last), their change rows and the base's rows. None: gold written in full.
    gold: dict[str, Any] | None = None
    # The silver rows' change to the quarantine histogram is saved at
    # histogram_change_path (False: none, the segments phase aggregates silver).
    quarantine_change: bool = False

    def manifest_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"mode": self.mode, "fingerprint": self.fingerprint}
        if self.base is not None:
            entry["from"] = self.base
        if self.touched_boards is not None:
            entry["touchedBoards"] = len(self.touched_boards)
        if self.touched_players is not None:
            entry["touchedPlayers"] = self.touched_players
        if self.rederived_records is not None:
            entry["rederivedRecords"] = self.rederived_records
        if self.gold is not None:
            entry["gold"] = self.gold
        return entry

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> Build | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None


def build_path(settings: Settings, generation: str) -> Path:
    """Where the recompute phase leaves its Build for the segments phase (the two
    can run as separate Airflow tasks)."""
    return settings.run_dir / BUILDS_DIR / f"{generation}.json"


def histogram_change_path(settings: Settings, generation: str) -> Path:
    """Where an incremental recompute leaves the quarantine histogram's change
    (jobs/quarantine.py) for the segments phase, next to its Build."""
    return settings.run_dir / BUILDS_DIR / f"{generation}.quarantine.parquet"


def fingerprint(
    boards: BoardsConfig,
    seasons: Iterable[Season],
    points_range: tuple[int, int],
    bucket_target: int,
    quarantine: tuple[float, int] | None = None,
) -> str:
    """Everything besides the log that decides a generation's bytes.

    ``quarantine``: the thresholds' (quantile, min samples); an incremental build
    keeps the untouched boards' thresholds, which is right only under the same."""
    body: dict[str, Any] = {
        "version": BUILD_VERSION,
        "boards": json.loads(boards.model_dump_json()),
        "seasons": [json.loads(s.model_dump_json()) for s in seasons],
        "points": list(points_range),
        "bucketTarget": bucket_target,
    }
    if quarantine is not None:
        body["quarantine"] = [float(quarantine[0]), int(quarantine[1])]
    text = json.dumps(body, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Previous:
    """The last published generation, valid as the base of an incremental build."""

    generation: str
    boundary: dict[int, int]
    manifest: dict[str, Any]
    directory: Path


def previous_state(
    settings: Settings,
    manifest_json: str | None,
    generation: str | None,
    fp: str,
    boundary: Mapping[int, int],
    silver_tables: Iterable[str],
) -> tuple[Previous | None, str]:
    """(the previous generation, "") when an incremental build may extend it, else
    (None, why not)."""
    if manifest_json is None or generation is None:
        return None, "no previous generation"
    manifest = json.loads(manifest_json)
    build = manifest.get("build") or {}
    if build.get("fingerprint") != fp:
        return None, "configuration or build version changed"
    recorded = manifest.get("tableVersions") or {}
    tables = list(silver_tables)
    current = table_versions(settings.delta_dir, tables)
    for table in tables:
        if table not in recorded or current.get(table) != recorded[table]:
            return None, f"{table} was written after {generation}"
    before = {int(p): int(v) for p, v in (manifest.get("boundary") or {}).items()}
    if set(before) != set(boundary):
        return None, "the partitions changed"
    if any(int(boundary[p]) < before[p] for p in before):
        return None, "the boundary moved backwards"
    directory = settings.segments_dir / generation
    if not (directory / "manifest.json").is_file():
        return None, f"{generation}'s segments are not on disk"
    return Previous(generation, before, manifest, directory), ""


def hidden_players(previous: Previous) -> set[str]:
    """Players the previous generation left out (its ``<board>.hidden.arrow``)."""
    players: set[str] = set()
    for meta in previous.manifest.get("boards", {}).values():
        name = meta.get("hidden")
        if not name:
            continue
        with pa.memory_map(str(previous.directory / name)) as source:
            table = ipc.open_file(source).read_all()
        players.update(table.column("player_id").to_pylist())
    return players


def transform_touched_history(events: DataFrame, touched: DataFrame) -> DataFrame:
    """Every log record of the ``touched`` players (one ``player_id`` column): what
    the first-achieved replay of those players folds over."""
    return events.join(F.broadcast(touched), "player_id", "left_semi")


def silver_properties(path: Path, columns: Iterable[str]) -> dict[str, str]:
    """The table properties the silver table at ``path`` with ``columns`` is kept
    with: deletion vectors on, statistics on those of its keys it has
    (``SILVER_STATS_COLUMNS``; a table written before games has no ``game``, and
    Delta refuses to name a missing column). A write that creates the table takes
    them as options (Delta makes them its properties); :func:`set_silver_properties`
    sets them on an existing one.

    Without deletion vectors a ``MERGE`` rewrites every file holding a touched
    player's row, and the touched players of even a small delta are spread over
    every file of silver (no layout keyed by player keeps a few thousand random
    players in a few files), so an incremental publish rewrote all of silver. With
    them it marks the replaced rows in a deletion vector per file and writes only
    the new rows: the cost follows the delta. Readers need deletion-vector support
    (Delta reader version 3): Spark with Delta, DuckDB's ``delta`` extension, the
    ``deltalake`` package's ``QueryBuilder`` (docs/ANALYSTS.md); ``OPTIMIZE`` (``lb
    maintain``) compacts the files a merge leaves and drops their deleted rows.
    """
    present = set(columns)
    keys = [c for c in SILVER_STATS_COLUMNS[path.name].split(",") if c in present]
    return {DELETION_VECTORS: "true", STATS_COLUMNS: ",".join(keys)}


def set_silver_properties(spark: SparkSession, path: Path) -> None:
    """Give the silver table at ``path`` its :func:`silver_properties` (one
    metadata commit, only while one is missing or differs: a table written by
    older code)."""
    # delta.`<path>` names a table by path only when the path is absolute.
    table = f"delta.`{path.resolve()}`"
    # SHOW TBLPROPERTIES reads the snapshot's metadata only: no Spark job, where
    # DeltaTable.detail() ran four (it sums the files' sizes): 8 of a small full
    # publish's 77 jobs (bench.spark_profile --count-publish).
    properties = {
        row["key"]: row["value"]
        for row in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
    }
    # The schema is the snapshot's metadata too (no job).
    columns = spark.read.format("delta").load(str(path)).columns
    wanted = silver_properties(path, columns)
    if any(properties.get(k) != v for k, v in wanted.items()):
        on = ", ".join(f"'{k}' = '{v}'" for k, v in wanted.items())
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({on})")


MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


def key_condition(keys: Iterable[str]) -> str:
    """A merge condition: target ``t`` and source ``s`` equal on every key."""
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)


def replaced_pairs(earlier: DataFrame, silver: DataFrame) -> tuple[DataFrame, str]:
    """(replaced rows, merge condition) of the pairs ``earlier`` in
    silver_contributions: there a match is as its game sent it, with its ``game``
    column (a table without one predates games: one game, its ids as they are)."""
    if "game" not in silver.columns:
        return earlier, key_condition(PAIR)
    qualified = F.col("match_id").contains(GAME_SEP)
    keys = earlier.select(
        "player_id",
        F.substring_index(F.col("match_id"), GAME_SEP, -1).alias("match_id"),
        F.when(qualified, F.substring_index(F.col("match_id"), GAME_SEP, 1))
        .otherwise(F.lit(DEFAULT_GAME))
        .alias("game"),
    )
    return keys, key_condition((*PAIR, "game"))


# Up to this many rows of ``replaced``, load_replace deletes the old rows with a
# DELETE whose condition lists them instead of a MERGE that joins them: 8 Spark
# jobs against 14 for a few keys on a small table (both with deletion vectors),
# which is most of a generation published every few minutes at low traffic, and
# of the tests' publishes. Beyond it the condition would grow with the delta;
# the MERGE's broadcast join does not.
SMALL_REPLACE = 64


def key_predicate(row: Row) -> Column:
    """The target rows with every key of ``row`` (a row of ``replaced`` from
    :func:`replaced_pairs`): what :func:`key_condition` matches, for one row."""
    return reduce(and_, (F.col(k) == F.lit(v) for k, v in row.asDict().items()))


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (backslash escapes are on by
    default: ``spark.sql.parser.escapedStringLiterals``)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def players_condition(scope_boards: DataFrame) -> str | None:
    """A SQL condition true on exactly the rows of the players of
    ``scope_boards`` (:func:`transform_scope_boards`); None when there is none.

    A condition a Delta ``DELETE`` evaluates row by row, where a ``MERGE`` that
    joins the scope reads the table three times (the touched files, the modified
    data, the deletion vectors): for 83 k players over a 20 M-row table the
    ``DELETE`` took 5.9 s against the ``MERGE``'s 10.4 (bench/RESULTS.md, "The
    same delta over a 10 M-player board"). One SQL string, not a Column built in
    PySpark: that takes a Py4J call per value (11.7 s for 20 k ids)."""
    players = sorted(r[0] for r in scope_boards.select("player_id").collect())
    if not players:
        return None
    return f"player_id IN ({', '.join(map(sql_string, players))})"


def load_replace(
    spark: SparkSession,
    path: Path,
    fresh: DataFrame,
    replaced: DataFrame,
    condition: str,
    predicate: Callable[[Row], Column],
) -> None:
    """Replace rows of the Delta table at ``path``: delete the target rows ``t``
    that ``condition`` matches with a row ``s`` of ``replaced`` (small: it is
    broadcast; a target row should match at most one), then append ``fresh``.
    ``predicate`` gives the same rows for one row of ``replaced``: up to
    :data:`SMALL_REPLACE` of them, their disjunction is a ``DELETE``'s condition.

    The caller guarantees that every target row with a key of ``fresh`` is among
    the replaced ones (it read those rows before: the pairs' old contributions,
    the scope's old totals), so the result is what a ``MERGE`` of ``fresh`` with
    update, insert and delete clauses gives, without its cost: such a ``MERGE``
    with deletion vectors runs three joins of its source with the whole target
    (find the touched files, write the changed rows, write the deletion vectors),
    and its insert clause makes the second an outer join with the source on the
    outer side, which Spark cannot broadcast: the whole target was shuffled and
    sorted (bench/RESULTS.md). A delete-only ``MERGE`` has inner joins only, so
    the broadcast source makes each a scan of the target's files; the new rows
    are a plain append. Two commits (one when nothing is replaced): a reader of
    the table's latest version between them misses the replaced rows, which is
    why a generation records the versions it was built from
    (``tableVersions``), and why an interrupted publish makes the next one full
    (:func:`previous_state` compares those versions).

    ``replaced`` must be deterministic (e.g. derived from a ``localCheckpoint``):
    the ``MERGE`` reads it as is instead of materializing a copy."""
    from delta.tables import DeltaTable

    target = DeltaTable.forPath(spark, str(path))
    few = replaced.limit(SMALL_REPLACE + 1).collect()
    if 0 < len(few) <= SMALL_REPLACE:
        target.delete(reduce(or_, map(predicate, few)))
    elif few:
        with _conf(spark, {MATERIALIZE_SOURCE: "none"}):
            (
                target.alias("t")
                .merge(F.broadcast(replaced).alias("s"), condition)
                .whenMatchedDelete()
                .execute()
            )
    _append(target, path, fresh)


def _append(target: Any, path: Path, *frames: DataFrame) -> None:
    """Append ``frames`` to the Delta table ``target`` (a ``DeltaTable``) at
    ``path``, in its columns; a frame without ``game`` takes its board's."""
    columns = list(target.toDF().columns)
    rows = None
    for frame in frames:
        if "game" in columns and "game" not in frame.columns:
            frame = frame.withColumn("game", game_column(F.col("board")))
        frame = frame.select(*columns)
        rows = frame if rows is None else rows.unionByName(frame)
    assert rows is not None
    rows.write.format("delta").mode("append").save(str(path))


def replace_where(
    spark: SparkSession,
    path: Path,
    where: str | None,
    fresh: DataFrame,
    kept: DataFrame,
) -> None:
    """Replace the rows of the Delta table at ``path`` that the SQL condition
    ``where`` selects (None: none) with ``fresh`` and ``kept``: one ``DELETE``
    (deletion vectors), then one append.

    The caller read the selected rows before (a ``localCheckpoint``): ``kept`` is
    those it keeps as they are, ``fresh`` the new rows of the others. Two commits
    (one when ``where`` is None), as :func:`load_replace`."""
    from delta.tables import DeltaTable

    target = DeltaTable.forPath(spark, str(path))
    if where is not None:
        target.delete(where)
    _append(target, path, fresh, kept)


@contextmanager
def _conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Session settings for the duration of the block (previous values restored)."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


def link_board(
    previous: Previous, board: str, directory: Path, checksums: Mapping[str, str]
) -> dict[str, Any]:
    """Hard-link one untouched board's files from the previous generation; returns
    its manifest entry (with the per-file checksums)."""
    meta = dict(previous.manifest["boards"][board])
    # A layered board's base and layers too (serving/layers.py).
    names = [*chain_files(meta), *([meta["hidden"]] if "hidden" in meta else [])]
    sums = {}
    for name in names:
        os.link(previous.directory / name, directory / name)
        sums[name] = checksums[name]
    meta["checksums"] = sums
    return meta


def compact_linked_board(
    previous: Previous,
    board: str,
    directory: Path,
    checksums: Mapping[str, str],
    bucket_target: int,
) -> dict[str, Any]:
    """An untouched board of a compacting publish: a layered one is written as one
    full base with the same answers (serving/layers.py ``compact_board``), any other
    one is linked as :func:`link_board` links it. Returns its manifest entry."""
    meta = dict(previous.manifest["boards"][board])
    if not is_layered(meta):
        return link_board(previous, board, directory, checksums)
    entry = {
        k: v
        for k, v in meta.items()
        if k not in ("base", "basePopulation", "layers", "hidden")
    }
    entry.update(
        compact_board(directory, previous.directory, board, meta, bucket_target)
    )
    if "hidden" in meta:
        # The shadowed players' side file is the board's own, not the chain's.
        os.link(previous.directory / meta["hidden"], directory / meta["hidden"])
        entry["hidden"] = meta["hidden"]
        entry["checksums"][meta["hidden"]] = checksums[meta["hidden"]]
    return entry


def gold_chain_full(previous: Previous, max_chain: int) -> bool:
    """Whether one more layer would pass ``max_chain`` whatever its size: then
    gold compacts, and its change rows are not worth computing."""
    chain = (previous.manifest.get("build") or {}).get("gold")
    return (len(chain["layers"]) if chain else 0) + 1 > max_chain


def next_gold_chain(
    previous: Previous,
    generation: str,
    changed: int,
    max_chain: int,
    max_fraction: float,
) -> dict[str, Any] | None:
    """The ``build.gold`` entry of ``generation``'s gold as ``changed`` rows over
    ``previous``'s, or None when the chain would pass ``max_chain`` layers or its
    rows ``max_fraction`` of the base's: then the generation's gold is written in
    full (a compaction) and the next chain starts from it."""
    chain = (previous.manifest.get("build") or {}).get("gold")
    if chain:
        base, layers = str(chain["base"]), list(chain["layers"])
        rows, base_rows = int(chain["rows"]), int(chain["baseRows"])
    else:
        # A full generation's gold rows are its boards' populations.
        base, layers, rows = previous.generation, [], 0
        base_rows = sum(
            int(meta.get("population", 0))
            for meta in previous.manifest.get("boards", {}).values()
        )
    layers.append(generation)
    rows += changed
    if len(layers) > max_chain or rows > max_fraction * max(1, base_rows):
        return None
    return {"base": base, "layers": layers, "rows": rows, "baseRows": base_rows}


def recompute_incremental(
    spark: SparkSession,
    delta_dir: Path,
    generation: str,
    inputs: RecomputeInputs,
    previous: Previous,
    clock: PhaseClock | None,
    gold_layering: tuple[int, float] | None = None,
    histogram_change: Path | None = None,
) -> Build:
    """Silver and gold of ``generation`` from ``previous`` plus the log's delta.

    ``gold_layering`` (max chain, max fraction: LB_LAYERS_MAX_*): gold is written
    as the changed rows over the previous generation's (:func:`next_gold_chain`)
    unless the chain would pass a limit; None: the re-ranked boards in full.
    ``histogram_change``: where to save the quarantine histogram's change (the
    replaced silver rows out, the re-derived ones in; jobs/quarantine.py).

    Only rows that can have changed are re-derived and merged: a contribution is a
    function of its (player, match)'s records and of the records sharing a
    (player, eventId) with them (a player's records share one partition, so the
    delta never reorders earlier ones), so only the pairs with a record in the delta
    change, plus the match of a held record a ``released`` record in the delta lets
    count (jobs/incremental_pairs.py). A total is a function of the player's
    contributions on that board, so only the (board, player) keys of those pairs'
    old and new rows change; they are aggregated from the other pairs' silver rows
    plus the re-derived ones. The boards of those keys (and of players whose
    shadow flag flipped) are re-ranked. Only the first-achieved replay reads whole
    histories, of the touched players on ``first_achieved`` boards."""
    delta = transform_between_boundaries(
        inputs.events, previous.boundary, inputs.boundary
    )
    delta_keys = delta.select("player_id", "match_id", "event_id", "status")
    delta_keys = delta_keys.transform(materialize)
    touched_count = delta_keys.select("player_id").distinct().count()
    history = transform_within_boundary(inputs.events, inputs.boundary).select(*NARROW)
    pairs = transform_touched_pairs(delta_keys, history).transform(materialize)
    delta_ids = delta_keys.select("player_id", "event_id").distinct()
    sources = transform_pair_sources(history, pairs, delta_ids).transform(materialize)
    source_count = sources.count()
    if clock is not None:
        clock.lap("read_pairs")
    derived = inputs.contributions(sources)
    fresh = derived.join(
        F.broadcast(pairs), ["player_id", "match_id"], "left_semi"
    ).transform(materialize)
    contributions = fresh.withColumn("generation", F.lit(generation))
    if clock is not None:
        clock.lap("recompute_contributions")
    contributions_path = delta_dir / SILVER_CONTRIBUTIONS
    totals_path = delta_dir / SILVER_TOTALS
    # Silver holds each match as its game sent it, with its game: qualified again
    # (``<game>~<matchId>``, jobs/recompute.py with_game) like the recompute's
    # events, so a (player, match) pair is one game's (issue 26).
    stored = spark.read.format("delta").load(str(contributions_path))
    silver = with_game(stored)
    # The pairs' old rows (what the totals lose; the contributions merge replaces
    # them): only pairs with records before the delta have any, and when none
    # does silver_contributions is not scanned at all.
    earlier = transform_earlier_pairs(sources, pairs, previous.boundary)
    earlier = earlier.transform(materialize)
    old = (
        silver.join(F.broadcast(earlier), PAIR, "left_semi")
        if not earlier.isEmpty()
        else silver.where(F.lit(False))
    )
    old = old.select(*CONTRIBUTION_KEYS, "aggregation", "points", "region", "removed")
    old = old.transform(materialize)
    if histogram_change is not None:
        save_histogram(
            collect_histogram(transform_histogram_change(fresh, old)),
            histogram_change,
        )
    scope = (
        contributions.select(*TOTAL_KEYS)
        .unionByName(old.select(*TOTAL_KEYS))
        .distinct()
        .transform(materialize)
    )
    # The scope's old totals. Its keys are too many to broadcast (~0.8 M at 100 k
    # events over 1 M players, a 2 GiB driver), its players with their boards are
    # not (one row per touched player): the join filters the rows read without
    # shuffling them. The totals merge deletes every row ``held`` holds, the
    # scope's and the others (``kept``, appended again as they were).
    scope_boards = transform_scope_boards(scope).transform(materialize)
    held_where = players_condition(scope_boards)
    # The rows that condition selects, by a broadcast join (cheaper per row than
    # the condition's set of strings; the same rows).
    held = (
        spark.read.format("delta")
        .load(str(totals_path))
        .join(F.broadcast(scope_boards.select("player_id")), "player_id", "left_semi")
        .transform(materialize)  # read before the table it reads is merged
    )
    before = transform_in_scope(held, scope_boards).select(
        *TOTAL_KEYS, "aggregation", "score", "matches"
    )
    kept = held.alias("t").join(
        F.broadcast(scope_boards).alias("s"), F.expr(ON_SCOPE), "left_anti"
    )
    achieved = None
    players = timed_players(scope, inputs.boards)
    if players is not None:
        # The first-achieved fold needs each such player's whole history.
        achieved = transform_achieved(
            transform_touched_history(inputs.events, players),
            inputs.boundary,
            inputs.boards.seasons,
            inputs.boards.window_lateness_ms,
            inputs.boards,
        )
    # sum totals from the old ones and the pairs' changes; only max boards (the
    # best contribution may be the one replaced) read the other pairs' rows.
    # The scope's boards with their aggregation, in one job: they give these max
    # boards and, below, the boards to re-rank (the scope's boards are those of
    # ``fresh`` and ``old``).
    scope_aggregations = (
        fresh.select("board", "aggregation")
        .unionByName(old.select("board", "aggregation"))
        .distinct()
        .collect()
    )
    best = sorted({r[0] for r in scope_aggregations if r[1] == "max"})
    summed = transform_sum_totals(before, old, fresh)
    if best:
        max_scope = transform_scope_boards(scope.where(F.col("board").isin(best)))
        summed = summed.where(~F.col("board").isin(best)).unionByName(
            transform_scope_totals(
                silver,
                fresh.where(F.col("board").isin(best)),
                pairs,
                max_scope,
                asc_boards(inputs.boards),
            )
        )
    totals = (
        with_achieved(summed, achieved)
        .join(scope, list(TOTAL_KEYS), "left_semi")
        .withColumn("generation", F.lit(generation))
        .transform(materialize)
    )
    if clock is not None:
        clock.lap("totals_inputs")
    # Boards to re-rank: those where a total may have changed, and those of a
    # player whose shadow flag changed since the previous generation.
    boards = {r[0] for r in scope_aggregations}
    flipped = sorted(inputs.shadowed ^ hidden_players(previous))
    if flipped:
        flagged = spark.createDataFrame([(p,) for p in flipped], "player_id string")
        boards |= {
            r[0]
            for r in spark.read.format("delta")
            .load(str(totals_path))
            .join(F.broadcast(flagged), "player_id", "left_semi")
            .select("board")
            .distinct()
            .collect()
        }
    # A record's result names the boards whose version it moved: those boards'
    # segments are rewritten too (else a linked segment would keep versions of an
    # older boundary, which the next build's versions start from).
    named = transform_versions(delta.select("player_id", "raw")).select("board")
    listed = set(previous.manifest.get("boards", {}))
    boards |= {r[0] for r in named.distinct().collect()} & listed
    touched_boards = sorted(boards)
    # Silver written by a full publish of older code may lack its properties.
    set_silver_properties(spark, contributions_path)
    set_silver_properties(spark, totals_path)
    if clock is not None:
        clock.lap("touched_boards")
    # Every silver row of a touched pair is in ``old`` and every old total of the
    # scope in ``before``: replacing exactly those with the re-derived rows is the
    # merge (load_replace; the totals' by their players, replace_where).
    load_replace(
        spark,
        contributions_path,
        # The match as its game sent it, as the full build writes it (load_silver).
        contributions.withColumn(
            "match_id", F.substring_index(F.col("match_id"), GAME_SEP, -1)
        ),
        *replaced_pairs(earlier, stored),
        key_predicate,
    )
    if clock is not None:
        clock.lap("merge_contributions")
    replace_where(spark, totals_path, held_where, totals, kept)
    if clock is not None:
        clock.lap("merge_totals")
    merged = spark.read.format("delta").load(str(totals_path))
    gold = None
    # No total re-derived and no shadow flag flipped: no public row moved, so the
    # generation's gold is its parent's. A layered parent's chain is repeated as it
    # is: a layer of no rows would take a place in the chain, and an idle game
    # would compact (rewrite all of gold) every LB_LAYERS_MAX_CHAIN publishes.
    unchanged = not scope_aggregations and not flipped
    if gold_layering is not None and unchanged and gold_chain(previous.manifest):
        gold = dict(previous.manifest["build"]["gold"])
        for table in (GOLD_SNAPSHOTS, GOLD_CHANGES):
            drop_crashed_rows(spark, delta_dir / table, generation)
    elif gold_layering is not None and not gold_chain_full(previous, gold_layering[0]):
        # Layered gold: only the keys whose public row may have moved, with their
        # new total or ``removed``: the scope's (their new totals are ``totals``;
        # a key without one lost its total) and those of the players whose shadow
        # flag flipped (their rows in silver, found by a broadcast filter). Never
        # a scan of every total joined with the scope.
        columns = [*TOTAL_KEYS, "score", "achieved_ms"]
        rows = scope.join(totals.select(*columns), list(TOTAL_KEYS), "left")
        if flipped:
            rows = rows.unionByName(
                merged.join(F.broadcast(flagged), "player_id", "left_semi")
                .select(*columns)
                .join(scope, list(TOTAL_KEYS), "left_anti")
            )
        hidden = sorted(inputs.shadowed)
        changes = rows.withColumn(
            "removed",
            F.col("score").isNull()
            | (F.col("player_id").isin(hidden) if hidden else F.lit(False)),
        ).transform(materialize)
        gold = next_gold_chain(previous, generation, changes.count(), *gold_layering)
        if gold is not None:
            drop_crashed_rows(spark, delta_dir / GOLD_SNAPSHOTS, generation)
            load_gold_changes(
                changes,
                delta_dir / GOLD_CHANGES,
                generation,
                generation_number(generation) or 0,
                gold["base"],
            )
    if gold is None:
        gold_path = delta_dir / GOLD_SNAPSHOTS
        if gold_chain(previous.manifest) is None:
            # The previous generation's rows of the boards not re-ranked (every
            # gold board has a manifest entry): none to read when every board was
            # touched, and a positive board list lets the scan skip files by their
            # board statistics.
            untouched = sorted(set(previous.manifest.get("boards", {})) - boards)
            kept = (
                spark.read.format("delta")
                .load(str(gold_path))
                .where(F.col("generation") == previous.generation)
                .where(F.col("board").isin(untouched) if untouched else F.lit(False))
                .select(*GOLD_COLUMNS)
            )
            if touched_boards:
                ranked = inputs.rank(merged.where(F.col("board").isin(touched_boards)))
                kept = kept.unionByName(ranked.select(*GOLD_COLUMNS))
        else:
            # A compaction of layered gold: every board ranked from silver, which
            # holds this generation's totals.
            kept = inputs.rank(merged).select(*GOLD_COLUMNS)
        load_gold_snapshot(kept, gold_path, generation)
    if clock is not None:
        clock.lap("rank_gold")
    return Build(
        MODE_INCREMENTAL,
        "",
        base=previous.generation,
        touched_boards=touched_boards,
        touched_players=touched_count,
        rederived_records=source_count,
        shadowed=sorted(inputs.shadowed),
        gold=gold,
        quarantine_change=histogram_change is not None,
    )
