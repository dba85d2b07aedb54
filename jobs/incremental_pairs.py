"""The records an incremental build re-derives: the touched (player, match) pairs'.

A contribution is a function of its (player, match)'s records (revision acceptance
is per match, the boards and cutoffs per record) plus, for each of those records,
the other records with the same (player, eventId): the first of them by position
is the one that counts (first acceptance), and a ``released`` record lets a held
one count. Nothing else of the player's history enters it. So an incremental build
re-derives exactly

* the pairs with a record in the log's delta, and the pairs of a held record a
  ``released`` record in the delta releases (:func:`transform_touched_pairs`);
* from their records plus every record sharing a (player, eventId) with them
  (:func:`transform_pair_sources`), with the same transforms as the full
  recompute, keeping only the touched pairs' rows (the extra records' own pairs
  come out partial and are dropped);

and the total of a touched (board, player) is its old total minus the pairs' old
rows plus their re-derived ones on ``sum`` boards (:func:`transform_sum_totals`),
and on ``max`` boards aggregated from the other pairs' existing silver rows plus
the re-derived ones (:func:`transform_scope_totals`).
Cost follows the delta's pairs, not the touched players' whole histories (with
Zipf activity the players a small delta touches own most of bronze).

The first-achieved replay (``tieBreak: first_achieved`` seasons) is a fold over a
player's whole history per board, so it still reads the whole history, of the
touched players on such boards only (:func:`timed_players`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from conf.boards import BoardsConfig, qualify
from jobs.recompute import transform_totals, transform_within_boundary
from jobs.spark import materialize

PAIR = ["player_id", "match_id"]
EVENT = ["player_id", "event_id"]


def transform_touched_pairs(delta: DataFrame, history: DataFrame) -> DataFrame:
    """(player_id, match_id) whose contributions may change: the delta's pairs and
    the pairs of earlier records a ``released`` record of the delta releases.

    ``delta``: the delta's records (player_id, match_id, event_id, status);
    ``history``: the log up to the new boundary (at least those columns)."""
    released = delta.where(F.col("status") == "released").select(*EVENT).distinct()
    own = delta.select(*PAIR)
    if released.isEmpty():  # the usual delta: no scan of the log for held records
        return own.distinct()
    held = history.join(F.broadcast(released), EVENT, "left_semi").select(*PAIR)
    return own.unionByName(held).distinct()


def transform_pair_sources(
    history: DataFrame, pairs: DataFrame, delta_ids: DataFrame
) -> DataFrame:
    """The records the touched pairs' contributions depend on: theirs, plus every
    record with the same (player, eventId) as one of theirs (an earlier duplicate
    in another match wins first acceptance; a ``released`` record releases).

    ``delta_ids``: the (player_id, event_id) of the delta's records, which are the
    pairs' own ids when no pair has an earlier record with another id (a delta of
    new matches: the usual case). So one scan of the log keeps the records of the
    pairs and those sharing a delta id (a broadcast hash join on the player, the
    pair or the id as its condition: bronze is filtered while scanned, once); only
    when the pairs' records hold other ids is the log scanned again, for those."""
    null = F.lit(None).cast("string")
    keys = pairs.select("player_id", "match_id", null.alias("event_id")).unionByName(
        delta_ids.select("player_id", null.alias("match_id"), "event_id")
    )
    on = (F.col("h.player_id") == F.col("k.player_id")) & (
        (F.col("h.match_id") == F.col("k.match_id"))
        | (F.col("h.event_id") == F.col("k.event_id"))
    )
    candidates = (
        history.alias("h")
        .join(F.broadcast(keys).alias("k"), on, "left_semi")
        .transform(materialize)
    )
    own = candidates.join(F.broadcast(pairs), PAIR, "left_semi")
    ids = own.select(*EVENT).distinct().transform(materialize)
    others = ids.join(F.broadcast(delta_ids), EVENT, "left_anti")
    # Every record sharing an id of the pairs is among the candidates unless the
    # pairs hold an id the delta does not (an earlier record of a corrected match).
    shared = candidates if others.isEmpty() else history
    sharing = shared.join(F.broadcast(ids), EVENT, "left_semi").join(
        F.broadcast(pairs), PAIR, "left_anti"
    )
    return own.unionByName(sharing)


def transform_earlier_pairs(
    sources: DataFrame, pairs: DataFrame, previous: Mapping[int, int]
) -> DataFrame:
    """The ``pairs`` with a record at or before the ``previous`` boundary among
    ``sources`` (:func:`transform_pair_sources`, which holds every record of the
    pairs): the only pairs that can have silver rows, since a contribution is
    derived from its pair's records. The others (new matches: most of a delta's)
    need no silver read."""
    return (
        transform_within_boundary(sources, previous)
        .join(F.broadcast(pairs), PAIR, "left_semi")
        .select(*PAIR)
        .distinct()
    )


ON_SCOPE = "t.player_id = s.player_id AND array_contains(s.boards, t.board)"


def transform_scope_boards(scope: DataFrame) -> DataFrame:
    """The (board, player) keys of ``scope`` as one row per player (player_id,
    boards): small enough to broadcast where the keys are not (a touched player
    is on ~10 of them), matched to a table ``t`` by :data:`ON_SCOPE`."""
    return scope.groupBy("player_id").agg(F.collect_set("board").alias("boards"))


def transform_in_scope(table: DataFrame, scope_boards: DataFrame) -> DataFrame:
    """The rows of ``table`` whose (board, player) is in ``scope_boards``
    (:func:`transform_scope_boards`): a broadcast semi-join, so the table is
    filtered while scanned, never shuffled."""
    return table.alias("t").join(
        F.broadcast(scope_boards).alias("s"), F.expr(ON_SCOPE), "left_semi"
    )


def transform_scope_totals(
    silver: DataFrame,
    fresh: DataFrame,
    pairs: DataFrame,
    scope_boards: DataFrame,
    asc: Column | None = None,
) -> DataFrame:
    """Totals of the (board, player) keys of ``scope_boards``
    (:func:`transform_scope_boards`): the other pairs' silver contribution rows
    (unchanged) plus the touched pairs' re-derived rows (``fresh``), aggregated
    with the full recompute's rule."""
    others = transform_in_scope(silver, scope_boards).join(
        F.broadcast(pairs), PAIR, "left_anti"
    )
    columns = fresh.columns
    return transform_totals(others.select(*columns).unionByName(fresh), asc)


def transform_sum_totals(
    before: DataFrame, old: DataFrame, fresh: DataFrame
) -> DataFrame:
    """Totals of ``sum`` boards' touched keys without reading the other pairs: the
    old total (``before``: board, player_id, aggregation, score, matches) minus the
    touched pairs' old rows (``old``) plus their re-derived ones (``fresh``). Exact:
    silver's total is the sum and count of silver's contribution rows (both are
    written from one recompute or merged together), integers, so subtracting a
    pair's old row and adding its new one gives what summing would. A key left with
    no contribution has no total (``matches`` 0: dropped). Rows of ``max`` keys
    come out wrong and must be replaced (:func:`transform_scope_totals`)."""
    keys = ["board", "player_id"]
    change = (
        fresh.select(*keys, "aggregation", "points", F.lit(1).alias("n"))
        .unionByName(
            old.select(
                *keys,
                "aggregation",
                (-F.col("points")).alias("points"),
                F.lit(-1).alias("n"),
            )
        )
        .unionByName(
            before.select(
                *keys,
                "aggregation",
                F.col("score").alias("points"),
                F.col("matches").alias("n"),
            )
        )
    )
    return (
        change.groupBy(*keys)
        .agg(
            F.first("aggregation").alias("aggregation"),
            F.sum("points").cast("bigint").alias("score"),
            F.sum("n").cast("bigint").alias("matches"),
        )
        .where(F.col("matches") > 0)
    )


def timed_players(scope: DataFrame, boards: BoardsConfig) -> DataFrame | None:
    """Players of the ``scope`` keys on a ``first_achieved`` season's boards, in
    every game (None when no season breaks ties by first achievement)."""
    prefixes = [
        qualify(game, f"season:{s.id}:")
        for game, own in boards.each_game()
        for s in own.seasons
        if s.tie_break == "first_achieved"
    ]
    if not prefixes:
        return None
    on_timed = F.lit(False)
    for prefix in prefixes:
        on_timed = on_timed | F.col("board").startswith(prefix)
    return scope.where(on_timed).select("player_id").distinct()
