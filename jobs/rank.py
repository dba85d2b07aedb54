"""Competition rank and display position of every player of every board.

No window ordered over a whole board (that funnels a board through one task):

1. range-partition and sort by (board, oriented score desc, achieved_ms asc, player
   asc) -- the oriented score is ``-score`` on ``order: asc`` boards (lower is
   better), ``score`` elsewhere (conf/boards.py BoardRules); the rows keep the real
   ``score`` --
   a total order, since a player appears once per board; Spark compares strings by
   UTF-8 bytes; achieved_ms (when the player reached the score) is set on
   ``tieBreak: first_achieved`` boards only;
2. number the rows inside each Spark partition (``monotonically_increasing_id`` is
   ``partition id << 33 | row index``), then count rows per (Spark partition, board)
   and turn the counts into offsets (a small table, one row per board slice);
3. position = offset of the slice + row index within the slice + 1;
4. rank = 1 + players with a strictly higher score = the smallest position among
   the players with the same (board, score); a per-(board, score) aggregate, so
   ties that span Spark partitions get one rank.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from conf.boards import BoardsConfig, qualify
from jobs.spark import materialize

ROW_BITS = 33


def asc_boards(boards: BoardsConfig, board: Column | None = None) -> Column:
    """True for the board ids (``board``, default the ``board`` column) of ``order:
    asc`` boards: asc seasons (and their replays' ``season:<S>@<R>:<scope>``) and
    the rolling windows the ``windows:`` block makes asc. The one place the batch
    layer reads the order off the boards file."""
    board = F.col("board") if board is None else board
    prefixes = [
        qualify(game, p)
        for game, own in boards.each_game()
        for s in own.seasons
        if s.order == "asc"
        for p in (f"season:{s.id}:", f"season:{s.id}@")
    ] + [
        qualify(game, f"{w}:")
        for game, own in boards.each_game()
        for w in ("daily", "weekly", "monthly", "alltime")
        if own.windows.of(w).order == "asc"
    ]
    test = F.lit(False)
    for prefix in prefixes:
        test = test | board.startswith(prefix)
    return test


def oriented(score: Column, asc: Column) -> Column:
    """The oriented score (higher is better on every board): ``-score`` where
    ``asc``; the same expression turns an oriented score back."""
    return F.when(asc, -score).otherwise(score)


def transform_sorted_slices(
    totals: DataFrame, num_partitions: int, asc: Column | None = None
) -> DataFrame:
    """Totals range-partitioned and sorted by display order, with slice coordinates.

    Adds ``_part`` (Spark partition id) and ``_row`` (index inside that partition).
    Materialized with a local checkpoint: range boundaries come from sampling, so
    the partitioning must be computed once and reused by both later steps.
    """
    # first_achieved boards order equal scores by achieved_ms (null elsewhere).
    key = F.col("score") if asc is None else oriented(F.col("score"), asc)
    order = [
        F.col("board"),
        key.desc(),
        F.coalesce(F.col("achieved_ms"), F.lit(0)),
        F.col("player_id"),
    ]
    achieved = (
        F.col("achieved_ms").cast("bigint")
        if "achieved_ms" in totals.columns
        else F.lit(None).cast("bigint")
    )
    tagged = (
        totals.select("board", "player_id", "score", achieved.alias("achieved_ms"))
        .repartitionByRange(num_partitions, *order)
        .sortWithinPartitions(*order)
        .withColumn("_part", F.spark_partition_id())
        .withColumn(
            "_row",
            F.monotonically_increasing_id()
            - F.shiftleft(F.col("_part").cast("bigint"), ROW_BITS),
        )
    )
    return tagged.transform(materialize)


def transform_positions(sliced: DataFrame) -> DataFrame:
    """Display position from slice offsets (needs ``_part`` and ``_row``)."""
    slices = sliced.groupBy("board", "_part").agg(
        F.count(F.lit(1)).alias("_n"), F.min("_row").alias("_first")
    )
    # Small: one row per (board, Spark partition) the board spans.
    before = (
        Window.partitionBy("board")
        .orderBy("_part")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    offsets = slices.withColumn(
        "_offset", F.coalesce(F.sum("_n").over(before), F.lit(0))
    ).drop("_n")
    return (
        sliced.join(F.broadcast(offsets), ["board", "_part"])
        .withColumn(
            "position", F.col("_offset") + F.col("_row") - F.col("_first") + F.lit(1)
        )
        .drop("_offset", "_first")
    )


def transform_ranks(positioned: DataFrame) -> DataFrame:
    """Competition rank: smallest position sharing the (board, score)."""
    firsts = positioned.groupBy("board", "score").agg(F.min("position").alias("rank"))
    return positioned.join(firsts, ["board", "score"])


def transform_rank(
    totals: DataFrame,
    num_partitions: int = 4,
    unique_boards: Iterable[str] = (),
    asc: Column | None = None,
) -> DataFrame:
    """(board, position, rank, player_id, score) for every (board, player) total,
    plus ``achieved_ms`` when the totals have it (first_achieved). On
    ``unique_boards`` (``rank: unique``) the rank is the position. ``asc``
    (:func:`asc_boards`) names the boards where a lower score is better; scores
    stay real."""
    sliced = transform_sorted_slices(totals, num_partitions, asc)
    ranked = transform_ranks(transform_positions(sliced))
    unique = sorted(unique_boards)
    rank = F.col("rank")
    if unique:
        rank = F.when(F.col("board").isin(unique), F.col("position")).otherwise(rank)
    columns: list[Column | str] = [
        "board",
        F.col("position").cast("bigint").alias("position"),
        rank.cast("bigint").alias("rank"),
        "player_id",
        F.col("score").cast("bigint").alias("score"),
    ]
    if "achieved_ms" in totals.columns:
        columns.append(F.col("achieved_ms").cast("bigint").alias("achieved_ms"))
    return ranked.select(*columns)


def board_orders(boards: BoardsConfig) -> dict[str, tuple[bool, bool]]:
    """Season boards ranked other than by (score, player id): board ->
    (first_achieved tie-break, unique ranks)."""
    return {
        qualify(game, f"season:{s.id}:{scope}"): (
            s.tie_break == "first_achieved",
            s.rank == "unique",
        )
        for game, own in boards.each_game()
        for s in own.seasons
        for scope in own.scopes
        if s.tie_break == "first_achieved" or s.rank == "unique"
    }
