"""Serving segments written by the executors, not the driver.

The gold rows of a generation are hash-partitioned by board; each task sorts its
boards' rows by (board, position) and writes each board's files (display-order rows,
player-id index, equi-depth bucket counts) straight into the generation's work
directory through :mod:`serving.segments`, then hands back one small row per board:
its manifest entry (population, file names, checksums). The driver only collects
those entries, so its memory does not grow with the boards' populations.

The same task gives each row its pair's version and writes the board's versions
side file (jobs/versions.py): the log's named versions travel with the rows (same
board hash), and an incremental build's task memory-maps the previous generation's
files of its boards, so the previous rows never enter Spark.

The work directory must be visible to every executor at the same path (one machine,
or a shared file system), as the Delta tables already must be.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# Per board: its manifest entry (null when it has no public rows) and its versions
# side file as JSON [name, sha256] (null when none).
ENTRY_SCHEMA = "board string, entry string, versions string"
SEGMENT_COLUMNS = ["board", "position", "player_id", "score", "achieved_ms"]
# What a row handed to the writer is: a gold row, a (board, player_id, version) the
# log named, or a board to visit even without either (rewritten boards whose rows
# may all be gone: their previous pairs move to the side file).
KIND_ROW, KIND_NAMED, KIND_BOARD = 0, 1, 2
# The rows a writer task takes, as Arrow (what :func:`with_named_and_markers` hands
# Spark's ``mapInArrow``); the columns a kind lacks are null.
ITEMS_SCHEMA = pa.schema(
    [
        ("board", pa.string()),
        ("position", pa.int64()),
        ("player_id", pa.string()),
        ("score", pa.int64()),
        ("achieved_ms", pa.int64()),
        ("kind", pa.int32()),
        ("version", pa.int64()),
    ]
)
# A writer task holds its rows in memory up to this many, then moves each board's
# rows to a file of its own on disk and writes one board at a time, so that its
# memory follows its largest board, not its share of the generation: the 10 M-player
# bench's full publish had 4 tasks of about 24 M rows, and one Python worker was
# killed by the kernel at 12.6 GB beside an 8 GiB driver (bench/RESULTS.md). At
# about 70 bytes a row as received, and the sorted copy beside it, 4 M rows is well
# under a gigabyte; the 1 M-player bench's tasks (about 3 M rows) stay in memory.
SPILL_ROWS = 4_000_000


def board_runs(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``batch``'s rows by board: (board, its rows), each board once."""
    from serving.segments import board_spans

    # Grouped by the boards' dictionary codes: a sort of integers, not of names.
    codes = pc.dictionary_encode(batch.column("board")).indices
    batch = batch.take(pc.sort_indices(codes))
    for board, begin, end in board_spans(batch.column("board")):
        yield board, batch.slice(begin, end - begin)


def board_tables(
    batches: Iterable[pa.RecordBatch], spill_rows: int, directory: Path
) -> Iterator[pa.Table]:
    """A writer task's rows as tables of whole boards: all in one table when they
    are at most ``spill_rows``; else one table per board, each board's rows first
    written to an Arrow file of their own in a scratch directory under
    ``directory`` (the generation's work directory: on the segments' disk, and
    swept with it if the task dies) and read back one board at a time."""
    stream = iter(batches)
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in stream:
        held.append(batch)
        count += batch.num_rows
        if count > spill_rows:
            break
    else:
        if count:
            yield pa.Table.from_batches(held)
        return
    with tempfile.TemporaryDirectory(prefix=".spill-", dir=directory) as scratch:
        files: dict[str, tuple[Path, pa.ipc.RecordBatchFileWriter]] = {}
        held.reverse()  # popped from the end: each batch let go once on disk

        def pending() -> Iterator[pa.RecordBatch]:
            while held:
                yield held.pop()
            yield from stream

        try:
            for batch in pending():
                for board, rows in board_runs(batch):
                    if board not in files:
                        path = Path(scratch) / f"{len(files)}.arrow"
                        files[board] = (path, pa.ipc.new_file(str(path), rows.schema))
                    files[board][1].write_batch(rows)
        finally:
            for _, writer in files.values():
                writer.close()
        for board in sorted(files):
            path = files[board][0]
            with pa.OSFile(str(path), "rb") as source:
                table = pa.ipc.open_file(source).read_all()
            path.unlink()
            yield table


def entries_batch(
    entries: Mapping[str, dict[str, Any]], sides: Mapping[str, list[str]]
) -> pa.RecordBatch:
    """A task's output (ENTRY_SCHEMA): per board written, its manifest entry and its
    versions side file, each as JSON."""
    boards = sorted({*entries, *sides})
    return pa.RecordBatch.from_arrays(
        [
            pa.array(boards, pa.string()),
            pa.array(
                [json.dumps(entries[b]) if b in entries else None for b in boards],
                pa.string(),
            ),
            pa.array(
                [json.dumps(sides[b]) if b in sides else None for b in boards],
                pa.string(),
            ),
        ],
        names=["board", "entry", "versions"],
    )


def collected_entries(
    written: list[Any],
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """The tasks' rows back on the driver: board -> manifest entry, board -> (side
    file, sha256)."""
    entries = {r["board"]: json.loads(r["entry"]) for r in written if r["entry"]}
    sides = {
        r["board"]: tuple(json.loads(r["versions"])) for r in written if r["versions"]
    }
    return entries, sides


def segment_writer(
    directory: str,
    bucket_target: int,
    orders: Mapping[str, tuple[bool, bool]],
    umask: int,
    previous: tuple[str, Mapping[str, tuple[str | None, str | None]]] | None = None,
    layering: tuple[str, float, int, Mapping[str, dict[str, Any]]] | None = None,
    spill_rows: int = SPILL_ROWS,
) -> Any:
    """The ``mapInArrow`` function: Arrow batches of gold rows, named versions and
    board markers in, (board, manifest entry, side file) out. A closure over plain
    values only (it is pickled to the executors); ``umask`` is the job's (files not
    world-readable), since a Python worker does not inherit the driver's. A task of
    more than ``spill_rows`` rows writes one board at a time (:func:`board_tables`).

    ``previous``: the previous generation's directory and board -> (segment file,
    versions side file) when the named versions are only the log's delta; each
    task reads its boards' files (memory-mapped) and takes the larger version
    (jobs/versions.py).

    ``layering``: (generation, max fraction, max chain, board -> the previous
    generation's manifest entry with its files' checksums): a board the previous
    generation has gets one more layer over it instead of a full segment, unless
    it is due a compaction (serving/layers.py)."""
    orders = dict(orders)
    if previous is not None:
        previous = (previous[0], dict(previous[1]))

    def write_boards(table: pa.Table) -> pa.RecordBatch:
        """One table of whole boards written; their entries and side files."""
        from jobs.versions import KNOWN_SCHEMA, assign_versions, previous_versions
        from serving.layers import write_layer_over
        from serving.segments import write_segments, write_versions

        kind = table.column("kind")
        rows = table.filter(pc.equal(kind, KIND_ROW))
        rows = rows.take(
            pc.sort_indices(
                rows, sort_keys=[("board", "ascending"), ("position", "ascending")]
            )
        )
        named = table.filter(pc.equal(kind, KIND_NAMED))
        known = [named.select(["board", "player_id", "version"]).cast(KNOWN_SCHEMA)]
        if previous is not None:
            where, files = previous
            for board in sorted(pc.unique(table.column("board")).to_pylist()):
                segment, side = files.get(board, (None, None))
                meta = layering[3].get(board) if layering is not None else None
                known.append(previous_versions(Path(where), board, segment, side, meta))
        versions, side = assign_versions(rows, pa.concat_tables(known))
        rows = rows.select(SEGMENT_COLUMNS).append_column("version", versions)
        sides: dict[str, list[str]] = {}
        before = os.umask(umask)
        try:
            layered: dict[str, dict[str, Any]] = {}
            if layering is not None and previous is not None:
                generation, fraction, chain, metas = layering
                for board in sorted(pc.unique(rows.column("board")).to_pylist()):
                    if board not in metas:
                        continue
                    part = rows.filter(pc.equal(rows.column("board"), board))
                    columns = ["player_id", "score", "version"]
                    if orders.get(board, (False, False))[0]:
                        columns.insert(2, "achieved_ms")
                    entry = write_layer_over(
                        Path(directory),
                        Path(previous[0]),
                        metas[board],
                        metas[board]["checksums"],
                        board,
                        generation,
                        part.select(columns),
                        fraction,
                        chain,
                    )
                    if entry is not None:
                        layered[board] = entry
                if layered:
                    rows = rows.filter(
                        pc.invert(
                            pc.is_in(rows.column("board"), pa.array(sorted(layered)))
                        )
                    )
            entries = write_segments(rows, Path(directory), bucket_target, orders)
            entries.update(layered)
            offset = 0
            for item in pc.value_counts(side.column("board")).to_pylist():
                part = side.slice(offset, item["counts"])
                offset += item["counts"]
                sides[item["values"]] = list(
                    write_versions(
                        Path(directory),
                        item["values"],
                        part.column("player_id").combine_chunks(),
                        part.column("version").combine_chunks(),
                    )
                )
        finally:
            os.umask(before)
        return entries_batch(entries, sides)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for table in board_tables(batches, spill_rows, Path(directory)):
            yield write_boards(table)

    return write


def with_named_and_markers(
    items: DataFrame, named: DataFrame, visit: Iterable[str]
) -> DataFrame:
    """``items`` (one kind of row) with the named versions (KIND_NAMED) and one
    marker row per board to visit (KIND_BOARD): what a writer task takes."""
    items = items.unionByName(
        named.select("board", "player_id", "version").withColumn(
            "kind", F.lit(KIND_NAMED)
        ),
        allowMissingColumns=True,
    )
    markers = sorted(set(visit))
    if markers:
        spark = items.sparkSession
        items = items.unionByName(
            spark.createDataFrame([(b,) for b in markers], "board string").withColumn(
                "kind", F.lit(KIND_BOARD)
            ),
            allowMissingColumns=True,
        )
    return items


def write_segments_distributed(
    gold: DataFrame,
    named: DataFrame,
    directory: Path,
    bucket_target: int,
    orders: Mapping[str, tuple[bool, bool]] | None = None,
    tasks: int | None = None,
    umask: int = 0o027,
    previous: tuple[Path, Mapping[str, tuple[str | None, str | None]]] | None = None,
    visit: Iterable[str] = (),
    layering: tuple[str, float, int, Mapping[str, dict[str, Any]]] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """Write every board of ``gold`` (one generation's rows) into ``directory`` from
    the executors, each row with its pair's version, and each board's versions side
    file; returns the manifest's boards map (with per-file checksums) and board ->
    (side file, sha256).

    ``named``: (board, player_id, version) the log named: the whole log's, or the
    delta's with ``previous`` (its directory, board -> (segment, side file)).
    ``visit``: boards to visit even with no row (rewritten boards)."""
    spark = gold.sparkSession
    items = with_named_and_markers(
        gold.select(*SEGMENT_COLUMNS).withColumn("kind", F.lit(KIND_ROW)), named, visit
    )
    tasks = tasks or int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    where = None if previous is None else (str(previous[0]), dict(previous[1]))
    written = (
        items.repartition(tasks, F.col("board"))
        .mapInArrow(
            segment_writer(
                str(directory),
                bucket_target,
                orders or {},
                umask,
                where,
                None if layering is None else (*layering[:3], dict(layering[3])),
            ),
            ENTRY_SCHEMA,
        )
        .collect()
    )
    return collected_entries(written)


# An incremental build with layered gold hands the writer its changes, not its
# boards' rows: (board, player_id, oriented score, achieved_ms, removed).
KIND_CHANGE = 3
CHANGE_COLUMNS = ["board", "player_id", "score", "achieved_ms", "removed"]


def changes_writer(
    directory: str,
    generation: str,
    bucket_target: int,
    orders: Mapping[str, tuple[bool, bool]],
    umask: int,
    previous: tuple[str, Mapping[str, tuple[str | None, str | None]]],
    parents: Mapping[str, dict[str, Any]],
    layering: tuple[float, int] | None,
) -> Any:
    """The ``mapInArrow`` function of :func:`write_changes_distributed`: per board,
    its changes and the versions the delta named in, (board, manifest entry, side
    file) out. Each board is the previous generation's (``parents``: board -> its
    manifest entry with its files' checksums, memory-mapped by the task) with the
    changes applied (serving/layers.py ``apply_changes``): the work is the
    changes', never the board's rows, unless the board is due a compaction."""
    orders = dict(orders)
    where, files = previous[0], dict(previous[1])
    parents = dict(parents)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from serving.layers import Parent, apply_changes
        from serving.segments import read_versions, write_versions

        received = list(batches)
        if not received:
            return
        table = pa.Table.from_batches(received)
        if table.num_rows == 0:
            return
        changes: dict[str, dict[str, tuple[int, int | None] | None]] = {}
        named: dict[str, dict[str, int]] = {}
        kinds = table.column("kind").to_pylist()
        boards = table.column("board").to_pylist()
        players = table.column("player_id").to_pylist()
        scores = table.column("score").to_pylist()
        achieved = table.column("achieved_ms").to_pylist()
        removed = table.column("removed").to_pylist()
        versions = table.column("version").to_pylist()
        for i, kind in enumerate(kinds):
            board = boards[i]
            if kind == KIND_CHANGE:
                changes.setdefault(board, {})[players[i]] = (
                    None if removed[i] else (int(scores[i]), achieved[i])
                )
            elif kind == KIND_NAMED:
                own = named.setdefault(board, {})
                own[players[i]] = max(own.get(players[i], 0), int(versions[i] or 0))
            else:
                changes.setdefault(board, {})
        entries: dict[str, dict[str, Any]] = {}
        sides: dict[str, list[str]] = {}
        before = os.umask(umask)
        try:
            for board in sorted({*changes, *named}):
                meta = parents.get(board)
                parent = (
                    None
                    if meta is None
                    else Parent(Path(where), meta, meta["checksums"])
                )
                side_name = files.get(board, (None, None))[1]
                side: dict[str, int] = {}
                if side_name is not None:
                    held = read_versions(Path(where) / side_name)
                    side = dict(
                        zip(
                            held.column("player_id").to_pylist(),
                            held.column("version").to_pylist(),
                            strict=True,
                        )
                    )
                entry, new_side = apply_changes(
                    Path(directory),
                    board,
                    generation,
                    parent,
                    changes.get(board, {}),
                    named.get(board, {}),
                    side,
                    bucket_target,
                    orders.get(board, (False, False)),
                    layering,
                )
                if entry is not None:
                    entries[board] = entry
                if new_side:
                    ids = sorted(new_side)
                    sides[board] = list(
                        write_versions(
                            Path(directory),
                            board,
                            pa.array(ids, pa.string()),
                            pa.array([new_side[p] for p in ids], pa.int64()),
                        )
                    )
        finally:
            os.umask(before)
        yield entries_batch(entries, sides)

    return write


def write_changes_distributed(
    changes: DataFrame,
    named: DataFrame,
    directory: Path,
    generation: str,
    bucket_target: int,
    orders: Mapping[str, tuple[bool, bool]],
    previous: tuple[Path, Mapping[str, tuple[str | None, str | None]]],
    parents: Mapping[str, dict[str, Any]],
    visit: Iterable[str],
    layering: tuple[float, int] | None,
    umask: int = 0o027,
    tasks: int | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """Write the boards ``changes`` (CHANGE_COLUMNS, oriented scores) and
    ``named`` (the delta's (board, player_id, version)) touch as the previous
    generation's plus the changes, from the executors; the same return as
    :func:`write_segments_distributed`. ``visit``: every rewritten board, even one
    with neither (its files are then the parent's, written again)."""
    spark = changes.sparkSession
    items = with_named_and_markers(
        changes.select(*CHANGE_COLUMNS).withColumn("kind", F.lit(KIND_CHANGE)),
        named,
        visit,
    )
    tasks = tasks or int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    written = (
        items.repartition(tasks, F.col("board"))
        .mapInArrow(
            changes_writer(
                str(directory),
                generation,
                bucket_target,
                orders,
                umask,
                (str(previous[0]), dict(previous[1])),
                dict(parents),
                layering,
            ),
            ENTRY_SCHEMA,
        )
        .collect()
    )
    return collected_entries(written)
