"""Phase 3 of a publish: segments, the manifest row, LAST ``manifest.json``.

The segment files are written into a temp directory by the executors
(jobs/segment_tasks.py) and renamed to ``<gen>/``; an incremental build rewrites
only the boards it re-ranked and hard-links the others' files from the previous
generation. Then the ``gold_manifest`` row is appended (idempotent:
``txnAppId=publish``, ``txnVersion`` = generation number) and, last,
``<gen>/manifest.json`` is written atomically; retention follows
(jobs/retention.py). The segment and manifest format is :mod:`serving`'s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.boards import BoardsConfig, board_rules
from conf.settings import Settings
from jobs.incremental import (
    MODE_INCREMENTAL,
    Build,
    Previous,
    build_path,
    compact_linked_board,
    histogram_change_path,
    link_board,
)
from jobs.land import BRONZE, bronze_path
from jobs.phase_clock import PhaseClock
from jobs.quarantine import (
    HISTOGRAM_FILE,
    collect_histogram,
    load_histogram,
    merge_histograms,
    save_histogram,
    thresholds_of,
    transform_histogram,
)
from jobs.rank import asc_boards, board_orders, oriented
from jobs.record_indexes import write_record_indexes
from jobs.retention import retain
from jobs.segment_tasks import write_changes_distributed, write_segments_distributed
from jobs.shadow import hidden_from
from jobs.table_versions import table_versions
from jobs.tables import (
    GOLD_CHANGES,
    GOLD_MANIFEST,
    GOLD_SNAPSHOTS,
    SILVER_CONTRIBUTIONS,
    SILVER_TOTALS,
    PublishedRow,
    extract_published,
    generation_ranking,
    load_manifest_row,
)
from jobs.versions import named_versions
from serving.files import TMP_PREFIX, atomic_write_text, fsync_dir
from serving.layers import chain_files
from serving.manifest import MANIFEST_FILE, build_manifest
from serving.segments import write_hidden

if TYPE_CHECKING:
    from jobs.publish import LandedInputs

DEFAULT_BUCKET_TARGET = 100
# Segment files and directories: owner rw, group r (run_publish's umask).
JOB_UMASK = 0o027

log = logging.getLogger(__name__)


class PublishAborted(RuntimeError):
    """Raised by the test hooks that simulate a crash mid-publish."""


def publish_segments(
    settings: Settings,
    spark: SparkSession,
    boards: BoardsConfig,
    generation: str,
    number: int,
    inputs: LandedInputs,
    *,
    bucket_target: int = DEFAULT_BUCKET_TARGET,
    fail_at: str | None = None,
    clock: PhaseClock | None = None,
    build: Build | None = None,
    compact: bool = False,
    published: list[PublishedRow] | None = None,
) -> str:
    """Phase 3: segments, the manifest row, LAST ``manifest.json``; retention.

    ``build``: how phase 2 built the generation (default: what it saved).
    ``compact``: every board of the generation is a full base (``lb publish
    --compact``): the rewritten boards are written in full, not as layers, and the
    untouched layered ones are compacted from their chains (same answers); the
    inline thresholds (LB_LAYERS_MAX_*) stay the safety net between compactions.
    ``published``: the generations published before this one, as this publish read
    them first (jobs/repair.py ``prepare_generation``); retention then takes them
    with this generation's row instead of reading ``gold_manifest`` again."""
    delta_dir = settings.delta_dir
    manifest_path = delta_dir / GOLD_MANIFEST
    boundary = inputs.boundary
    if build is None:
        build = Build.load(build_path(settings, generation))
    base = _segment_base(settings, spark, build)
    # An incremental build rewrites only the boards it re-ranked; the rest are the
    # previous generation's files (None: every board).
    only = build.touched_boards if base is not None and build is not None else None
    # Layered gold (jobs/tables.py): the rewritten boards are the previous
    # generation's files with the changes applied, never their whole rows.
    changes = build is not None and build.gold is not None and base is not None
    if changes:
        rows = (
            spark.read.format("delta")
            .load(str(delta_dir / GOLD_CHANGES))
            .where(F.col("generation") == generation)
        )
    elif build is not None and build.gold is not None:
        # The previous generation's files are gone: every board from the full
        # ranking of this layered generation.
        rows = generation_ranking(
            spark,
            delta_dir,
            generation,
            {"build": build.manifest_entry()},
            boards,
        )
    else:
        rows = (
            spark.read.format("delta")
            .load(str(delta_dir / GOLD_SNAPSHOTS))
            .where(F.col("generation") == generation)
        )
    if only is not None:
        rows = rows.where(F.col("board").isin(only))
    # Segments hold oriented scores (conf/boards.py BoardRules), gold the real ones:
    # in display order they descend on every board.
    rows = rows.withColumn("score", oriented(F.col("score"), asc_boards(boards)))
    named, previous_files = _named_versions(settings, spark, boundary, base, only)
    target = settings.segments_dir / generation
    tmp = settings.segments_dir / f"{TMP_PREFIX}{generation}-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        # Written by the executors (jobs/segment_tasks.py), each row with its
        # pair's version; only the board entries come back to the driver.
        if changes:
            assert base is not None and only is not None and previous_files is not None
            board_files, sides = write_changes_distributed(
                rows,
                named,
                tmp,
                generation,
                bucket_target,
                board_orders(boards),
                previous_files,
                _parents(*base, only),
                only,
                None
                if compact or settings.layers_max_chain < 1
                else (settings.layers_max_fraction, settings.layers_max_chain),
                umask=JOB_UMASK,
            )
        else:
            board_files, sides = write_segments_distributed(
                rows,
                named,
                tmp,
                bucket_target,
                board_orders(boards),
                umask=JOB_UMASK,
                previous=previous_files,
                visit=only or (),
                layering=None
                if compact
                else _layering(settings, generation, base, only),
            )
        # Shadowed players: in silver, left out of this generation's gold.
        write_hidden(
            [
                (board, player, board_rules(boards, board).orient(score))
                for board, player, score in _hidden_rows(
                    settings, spark, generation, build, only
                )
            ],
            tmp,
            board_files,
        )
        if base is not None:
            previous, checksums = base
            rewritten = set(only or ())
            for board in previous.manifest.get("boards", {}):
                if board in rewritten:
                    continue
                if compact:
                    board_files[board] = compact_linked_board(
                        previous, board, tmp, checksums, bucket_target
                    )
                else:
                    board_files[board] = link_board(previous, board, tmp, checksums)
            sides = _link_versions(previous, checksums, tmp, rewritten, sides)
        # The records this generation landed: what answers a redelivery once
        # the speed layer drops them at its rebase (serving/landed.py), and each
        # applied item, what a history read lists between two snapshots
        # (serving/contributions.py). Timed apart from the segment files: a
        # first publish's indexes parse every landed record in the driver.
        if clock is not None:
            clock.lap("segment_files")
        landed, contributions = write_record_indexes(
            settings, spark, generation, number, boundary, tmp, compact=compact
        )
        if clock is not None:
            clock.lap("record_indexes")
        thresholds = _thresholds(settings, spark, generation, build, base, tmp)
        if clock is not None:
            clock.lap("thresholds")
        fsync_dir(tmp)
        if target.exists():  # left by a crash before its manifest row: never visible
            shutil.rmtree(target)
        os.rename(tmp, target)
        fsync_dir(settings.segments_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if clock is not None:
        clock.lap("segments")
    if fail_at == "before_manifest_row":
        raise PublishAborted(f"{generation}: aborted before the manifest row")

    published_at = datetime.now(UTC)
    versions = table_versions(
        delta_dir,
        (BRONZE, SILVER_CONTRIBUTIONS, SILVER_TOTALS, GOLD_SNAPSHOTS, GOLD_CHANGES),
    )
    manifest_json = build_manifest(
        generation,
        published_at,
        boundary,
        board_files,
        thresholds,
        table_versions=versions,
        landing_started_at=inputs.landing_started_at,
        build=_build_entry(build, base),
        versions={board: name for board, (name, _) in sides.items()},
        landed=landed,
        contributions=contributions,
    )
    row = {
        "generation": generation,
        "generation_number": number,
        "boundary": {str(p): int(v) for p, v in boundary.items()},
        "board_count": len(board_files),
        "populations": {b: int(v["population"]) for b, v in board_files.items()},
        "checksums": {
            **{
                name: digest
                for v in board_files.values()
                for name, digest in v["checksums"].items()
            },
            **dict(sides.values()),
        },
        "published_at": published_at,
        "complete": True,
        "manifest_json": manifest_json,
    }
    load_manifest_row(spark, manifest_path, row, number)
    if fail_at == "before_manifest_json":
        raise PublishAborted(f"{generation}: aborted before manifest.json")
    atomic_write_text(target / MANIFEST_FILE, manifest_json)
    build_path(settings, generation).unlink(missing_ok=True)
    histogram_change_path(settings, generation).unlink(missing_ok=True)

    if clock is not None:
        clock.lap("manifest")
    if published is None:
        published = extract_published(spark, manifest_path)
    else:
        published = [*published, PublishedRow(generation, number, manifest_json)]
    retain(settings, published)
    if clock is not None:
        clock.lap("retention")
    return generation


def _segment_base(
    settings: Settings, spark: SparkSession, build: Build | None
) -> tuple[Previous, dict[str, str]] | None:
    """The previous generation whose untouched boards an incremental build links,
    with its per-file checksums; None when the segments are written in full."""
    if build is None or build.mode != MODE_INCREMENTAL or build.base is None:
        return None
    directory = settings.segments_dir / build.base
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return None  # gone: gold holds every row, so write every board
    if "versions" not in manifest:
        # Written before the versions side files: its pairs' versions are not all
        # on disk, so every board is written with the whole log's versions.
        return None
    row = (
        spark.read.format("delta")
        .load(str(settings.delta_dir / GOLD_MANIFEST))
        .where(F.col("generation") == build.base)
        .select("checksums")
        .first()
    )
    if row is None:
        return None
    boundary = {int(p): int(v) for p, v in manifest.get("boundary", {}).items()}
    previous = Previous(build.base, boundary, manifest, directory)
    return previous, dict(row["checksums"])


def _parents(
    previous: Previous, checksums: Mapping[str, str], only: list[str]
) -> dict[str, dict[str, Any]]:
    """The previous generation's manifest entries of the rewritten boards it has,
    each with the checksums of the files it names (what a layer links)."""
    boards = previous.manifest.get("boards", {})
    return {
        board: {
            **boards[board],
            "checksums": {n: checksums[n] for n in chain_files(boards[board])},
        }
        for board in only
        if board in boards
    }


def _layering(
    settings: Settings,
    generation: str,
    base: tuple[Previous, dict[str, str]] | None,
    only: list[str] | None,
) -> tuple[str, float, int, dict[str, dict[str, Any]]] | None:
    """What the segment writer needs to write the rewritten boards as layers over
    the previous generation's (serving/layers.py); None when layering is off or
    the segments are written in full."""
    if base is None or only is None or settings.layers_max_chain < 1:
        return None
    return (
        generation,
        settings.layers_max_fraction,
        settings.layers_max_chain,
        _parents(*base, only),
    )


def _hidden_rows(
    settings: Settings,
    spark: SparkSession,
    generation: str,
    build: Build | None,
    only: list[str] | None,
) -> list[tuple[str, str, int]]:
    """(board, player_id, score) of the rewritten boards' players silver holds and
    gold left out. The ranking drops exactly the shadowed players' totals
    (``transform_public``), so when the build recorded them (full and incremental
    builds both do) those are their silver rows on the rewritten boards: a
    filtered scan of silver_totals, none at all when nobody is shadowed (five Spark
    jobs of a small full publish's 53, ``bench.spark_profile --count-publish``),
    not a join of every silver total with the generation's gold rows. A build
    saved by older code (no ``shadowed``) is compared with gold."""
    silver_totals = spark.read.format("delta").load(
        str(settings.delta_dir / SILVER_TOTALS)
    )
    if only is not None:
        silver_totals = silver_totals.where(F.col("board").isin(only))
    if build is not None and build.shadowed is not None:
        if not build.shadowed or only == []:
            return []
        rows = (
            silver_totals.where(F.col("player_id").isin(build.shadowed))
            .select("board", "player_id", "score")
            .collect()
        )
        return [(r["board"], r["player_id"], int(r["score"])) for r in rows]
    gold = spark.read.format("delta").load(str(settings.delta_dir / GOLD_SNAPSHOTS))
    if only is not None:
        gold = gold.where(F.col("board").isin(only))
    return hidden_from(silver_totals, gold, generation)


def _thresholds(
    settings: Settings,
    spark: SparkSession,
    generation: str,
    build: Build | None,
    base: tuple[Previous, dict[str, str]] | None,
    directory: Path,
) -> dict[str, dict[str, int]]:
    """The manifest's quarantine thresholds, from this generation's histogram of
    silver contributions (jobs/quarantine.py), which it saves in ``directory``.

    An incremental build saved the histogram's change (its replaced and written
    silver rows): added to the previous generation's histogram it is this one,
    and silver is not read. Otherwise (a full build, or the previous histogram or
    the change is missing) every silver contribution is aggregated."""
    previous = (
        load_histogram(base[0].directory / HISTOGRAM_FILE)
        if base is not None and build is not None and build.quarantine_change
        else None
    )
    change = (
        load_histogram(histogram_change_path(settings, generation))
        if previous is not None
        else None
    )
    if previous is not None and change is not None:
        histogram = merge_histograms(previous, change)
        log.info("%s: quarantine histogram = the parent's + the change", generation)
    else:
        # Which of the three reasons: an operator seeing a slow thresholds phase
        # after an incremental build asks why silver was read whole.
        why = (
            "a full build"
            if build is None or not build.quarantine_change
            else "no parent histogram"
            if base is None or previous is None
            else "no saved change"
        )
        log.info("%s: quarantine histogram from all of silver (%s)", generation, why)
        contributions = spark.read.format("delta").load(
            str(settings.delta_dir / SILVER_CONTRIBUTIONS)
        )
        histogram = collect_histogram(transform_histogram(contributions))
    save_histogram(histogram, directory / HISTOGRAM_FILE)
    return thresholds_of(
        histogram, settings.quarantine_quantile, settings.quarantine_min_samples
    )


def _named_versions(
    settings: Settings,
    spark: SparkSession,
    boundary: Mapping[int, int],
    base: tuple[Previous, dict[str, str]] | None,
    only: list[str] | None,
) -> tuple[DataFrame, tuple[Path, dict[str, tuple[str | None, str | None]]] | None]:
    """The versions the segment writer starts from (jobs/versions.py): the log's
    delta and the previous generation's files (board -> (segment, side file)) when
    this build rewrites only some boards of one, else the whole log's."""
    if base is None or only is None:
        return named_versions(spark, bronze_path(settings), boundary), None
    previous = base[0]
    sides = previous.manifest.get("versions") or {}
    segments = {b: m.get("file") for b, m in previous.manifest["boards"].items()}
    files = {b: (segments.get(b), sides.get(b)) for b in {*segments, *sides}}
    named = named_versions(
        spark, bronze_path(settings), boundary, since=previous.boundary
    )
    return named, (previous.directory, files)


def _link_versions(
    previous: Previous,
    checksums: Mapping[str, str],
    directory: Path,
    rewritten: set[str],
    sides: dict[str, tuple[str, str]],
) -> dict[str, tuple[str, str]]:
    """``sides`` plus the previous generation's side files of the boards nothing
    rewrote (hard links). The writer visits every rewritten board and every board
    the delta names; a board it visited without a segment to rewrite must have had
    none (the recompute rewrites every listed board the delta names), else its
    linked segment's versions would be stale."""
    listed = set(previous.manifest.get("boards", {}))
    stale = sorted((set(sides) - rewritten) & listed)
    if stale:
        raise RuntimeError(f"versions of linked boards changed: {stale[:5]}")
    out = dict(sides)
    for board, name in (previous.manifest.get("versions") or {}).items():
        if board in rewritten or board in sides:
            continue
        os.link(previous.directory / name, directory / name)
        out[board] = (name, checksums[name])
    return out


def _build_entry(
    build: Build | None, base: tuple[Previous, dict[str, str]] | None
) -> dict[str, Any] | None:
    if build is None:
        return None
    entry = build.manifest_entry()
    if build.mode == MODE_INCREMENTAL and base is None:
        # Silver was merged, but every segment was written from gold.
        entry["segments"] = "full"
    return entry
