"""Recompute exact contributions and totals from bronze, up to a boundary vector.

Every ``transform_*`` is a pure ``DataFrame -> DataFrame`` function with its parameters
as arguments. Together they reproduce ``speed/lua/apply_event.lua`` from the log alone,
without trusting the statuses the speed layer wrote:

* the first record per (player, eventId) by position counts (duplicates are never
  logged; this is defensive);
* an event is *accepted* iff its sourceRevision is strictly above every earlier
  (position order) revision of the same (player, match) -- the Lua stores ``r`` for
  every non-superseded event, late ones included;
* the boards an event feeds are exactly :func:`conf.boards.boards_for_event`;
* a board ignores an event received after its cutoff (season: end +
  allowedLateness; daily/weekly/monthly: period end + windowLateness);
* contribution (player, match, board) exists iff some accepted, non-late event of the
  match fed the board; its value is the points of the LAST accepted non-late event of
  the match if that event feeds the board, else 0 (removed; the player stays);
* totals: ``sum`` adds contributions, ``max`` takes the largest non-removed one (0
  when none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import (
    DEFAULT_GAME,
    DEFAULT_WINDOW_LATENESS,
    GAME_SEP,
    SCOPE_GLOBAL,
    BoardsConfig,
    Season,
    Windows,
    qualify,
    split_board,
    to_ms,
)
from conf.periods import ALLTIME, DAILY, MONTHLY, WEEKLY
from conf.rules import RuleRegistry, default_registry
from jobs.rank import asc_boards
from jobs.rules import points_under

MS_PER_DAY = 86_400_000
# Matches with at most this many accepted events get their contributions from
# compiled expressions (transform_contributions); longer ones from interpreted
# higher-order functions.
UNROLLED = 4
DEFAULT_LATENESS_MS = int(DEFAULT_WINDOW_LATENESS.total_seconds() * 1000)

BOARD_STRUCT = "struct<board:string,aggregation:string,cutoff_ms:bigint,rule:string>"
BOARDS_TYPE = T.ArrayType(
    T.StructType(
        [
            T.StructField("board", T.StringType()),
            T.StructField("aggregation", T.StringType()),
            T.StructField("cutoff_ms", T.LongType()),
            T.StructField("rule", T.StringType()),
        ]
    )
)
# Match-record columns of bronze (tables landed before they existed lack them).
RECORD_COLUMNS = {
    "placement": "bigint",
    "kills": "bigint",
    "duration_seconds": "bigint",
    "scores": "map<string,bigint>",
    "status": "string",
}


def transform_held(events: DataFrame, released: DataFrame) -> DataFrame:
    """Drop quarantined records that no ``released`` record (within the boundary)
    released. Run after ``transform_accepted``: a held record takes its match's
    revision (a resend is superseded) even while it applies nothing."""
    flagged = released.withColumn("_released", F.lit(True))
    return (
        events.join(F.broadcast(flagged), ["player_id", "event_id"], "left")
        .where(
            F.col("status").isNull()
            | (F.col("status") != "quarantined")
            | F.col("_released").isNotNull()
        )
        .drop("_released")
    )


def transform_within_boundary(
    events: DataFrame, boundary: Mapping[int, int]
) -> DataFrame:
    """Keep log records at or before the boundary position of their partition.

    A partition missing from ``boundary`` contributes nothing.
    """
    if not boundary:
        return events.where(F.lit(False))
    # A map literal keeps the plan small even with thousands of partitions.
    pairs: list[Column] = []
    for partition, position in sorted(boundary.items()):
        pairs += [F.lit(int(partition)), F.lit(int(position)).cast("bigint")]
    limit = F.try_element_at(F.create_map(*pairs), F.col("partition"))
    return events.where(F.col("position") <= F.coalesce(limit, F.lit(-1)))


def transform_between_boundaries(
    events: DataFrame, after: Mapping[int, int], through: Mapping[int, int]
) -> DataFrame:
    """Log records with ``after[p] < position <= through[p]`` (the log's delta).

    Written as an OR of plain per-partition ranges, not a map lookup: Delta prunes
    partitions and skips files on such predicates (position min/max stats), so
    reading the delta does not scan the history.
    """
    ranges: list[Column] = []
    for partition, upper in sorted(through.items()):
        lower = int(after.get(partition, 0))
        if int(upper) > lower:
            ranges.append(
                (F.col("partition") == F.lit(int(partition)))
                & (F.col("position") > F.lit(lower).cast("bigint"))
                & (F.col("position") <= F.lit(int(upper)).cast("bigint"))
            )
    if not ranges:
        return events.where(F.lit(False))
    predicate = ranges[0]
    for more in ranges[1:]:
        predicate = predicate | more
    return events.where(predicate)


def transform_first_acceptance(events: DataFrame) -> DataFrame:
    """One record per (player, eventId): the first by position.

    Duplicates are rare (the speed layer never logs one; this is defensive), so
    instead of sorting every record by (player, eventId, position) for a window,
    a hash aggregate finds the few (player, eventId) logged more than once with
    their first position, and only those keys' later records are dropped (a
    broadcast join: no shuffle, the input's partitioning by player stays). Positions
    are unique within a partition and a player's records share one partition, so
    the first position names exactly one record.
    """
    repeated = (
        events.groupBy("player_id", "event_id")
        .agg(F.count(F.lit(1)).alias("_n"), F.min("position").alias("_first"))
        .where(F.col("_n") > 1)
        .drop("_n")
    )
    return (
        events.join(F.broadcast(repeated), ["player_id", "event_id"], "left")
        .where(F.col("_first").isNull() | (F.col("position") == F.col("_first")))
        .select(*events.columns)  # the input's column order (the join moved the keys)
    )


def transform_accepted(events: DataFrame) -> DataFrame:
    """Add ``accepted``: revision strictly above every earlier one of the match.

    Same player means same partition, so positions order the match's records.
    """
    earlier = (
        Window.partitionBy("player_id", "match_id")
        .orderBy("position")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    best_before = F.max("source_revision").over(earlier)
    return events.withColumn(
        "accepted",
        best_before.isNull() | (F.col("source_revision") > best_before),
    )


def _board(
    name: Column, aggregation: str, cutoff_ms: int | Column, rule: str
) -> Column:
    cutoff = cutoff_ms if isinstance(cutoff_ms, Column) else F.lit(cutoff_ms)
    return F.struct(
        name.alias("board"),
        F.lit(aggregation).alias("aggregation"),
        cutoff.cast("bigint").alias("cutoff_ms"),
        F.lit(rule).alias("rule"),
    )


def with_record_columns(events: DataFrame) -> DataFrame:
    """Bronze with every match-record column (null where the table predates it)
    and its game (:func:`with_game`)."""
    for name, kind in RECORD_COLUMNS.items():
        if name not in events.columns:
            events = events.withColumn(name, F.lit(None).cast(kind))
    return with_game(events)


def with_game(events: DataFrame) -> DataFrame:
    """``game`` (``default`` where the table predates games, API.md "Games"), and
    the eventId and matchId of another game's events as ``<game>~<id>``: every
    (player, event) and (player, match) key of the recompute is then within one
    game (the same ids in two games are two events), as in the speed layer's
    records (NormalizedEvent.identity). ``~`` is in no id, so this is idempotent."""
    if "game" not in events.columns:
        return events.withColumn("game", F.lit(DEFAULT_GAME))
    # Rows landed before the column existed (mergeSchema added it) read null: the
    # game default's, or a boards file with games: would give them no boards.
    events = events.withColumn("game", F.coalesce(F.col("game"), F.lit(DEFAULT_GAME)))
    game = F.col("game")
    other = game != F.lit(DEFAULT_GAME)
    for name in ("event_id", "match_id"):
        if name in events.columns:
            column = F.col(name)
            events = events.withColumn(
                name,
                F.when(
                    other & ~column.contains(GAME_SEP),
                    F.concat(game, F.lit(GAME_SEP), column),
                ).otherwise(column),
            )
    return events


def _printf(pattern: str, *fields: Column) -> Column:
    """``pattern % fields`` for the integer patterns of conf.periods (``%0Nd`` and
    literal text), as string concatenation: Spark compiles ``concat``/``lpad`` into
    the stage's generated code, while ``format_string`` builds a
    ``java.util.Formatter`` per row (the largest single cost of deriving boards for
    10 M events). Same strings for fields >= 0; a field wider than N is kept whole,
    as ``%0Nd`` does."""
    parts: list[Column] = []
    pending = iter(fields)
    for literal, width in _PRINTF.findall(pattern):
        if literal:
            parts.append(F.lit(literal.replace("%%", "%")))
        if width:
            text = next(pending).cast("string")
            parts.append(
                F.when(F.length(text) >= int(width), text).otherwise(
                    F.lpad(text, int(width), "0")
                )
            )
    if next(pending, None) is not None:
        raise ValueError(f"more fields than {pattern!r} formats")
    return F.concat(*parts)


# A pattern is literal text and %0Nd fields (conf.periods); anything else fails
# loudly in _check_printf rather than formatting differently from the speed layer.
_PRINTF = re.compile(r"((?:[^%]|%%)*)(?:%0(\d)d)?")


def _check_printf(pattern: str) -> str:
    if "".join(a + (f"%0{w}d" if w else "") for a, w in _PRINTF.findall(pattern)) != (
        pattern
    ):
        raise ValueError(f"unsupported period pattern {pattern!r}")
    return pattern


def board_columns(
    occurred_ms: Column,
    region: Column,
    seasons: Iterable[Season],
    window_lateness_ms: int = DEFAULT_LATENESS_MS,
    window_rule: str = "v1",
    windows: Windows | None = None,
    prefix: str = "",
) -> Column:
    """Array of (board, aggregation, cutoff_ms) an event feeds, as boards_for_event;
    ``prefix``: of a game's internal board ids (``arena~``, conf.boards.qualify).

    Computed from epoch milliseconds with date arithmetic only, so the answer does
    not depend on the session time zone. A rolling window's cutoff is its period's
    end (next day, next ISO Monday, first of next month) plus ``window_lateness_ms``.

    Built without higher-order functions (a season's boards are a ``concat`` of
    an empty or a two-element array, not a ``filter`` of nulls): Spark evaluates a
    lambda and everything under it row by row in interpreted mode, outside the
    generated code, which made deriving boards most of the full recompute.
    """
    day = F.date_from_unix_date(F.floor(occurred_ms / F.lit(MS_PER_DAY)).cast("int"))
    # ISO week: the week's Thursday decides the ISO year (weekday(): Monday = 0).
    thursday = F.date_add(day, F.lit(3) - F.weekday(day))
    iso_year = F.year(thursday)
    iso_week = F.floor((F.dayofyear(thursday) - 1) / 7).cast("int") + 1

    def end_ms(end_day: Column) -> Column:
        return F.unix_date(end_day).cast("bigint") * F.lit(MS_PER_DAY) + F.lit(
            window_lateness_ms
        )

    # The patterns live in conf.periods, shared with the speed layer; a rolling
    # window's cutoff is its period's end plus the lateness.
    periods = [
        (
            "daily",
            _printf(_check_printf(DAILY), F.year(day), F.month(day), F.dayofmonth(day)),
            end_ms(F.date_add(day, 1)),
        ),
        (
            "weekly",
            _printf(_check_printf(WEEKLY), iso_year, iso_week),
            end_ms(F.date_add(day, F.lit(7) - F.weekday(day))),
        ),
        (
            "monthly",
            _printf(_check_printf(MONTHLY), F.year(day), F.month(day)),
            end_ms(F.add_months(F.trunc(day, "month"), 1)),
        ),
        ("alltime", F.lit(ALLTIME), F.lit(0)),
    ]
    board_type = BOARDS_TYPE
    arrays: list[Column] = []
    for season in seasons:
        inside = (occurred_ms >= F.lit(to_ms(season.start))) & (
            occurred_ms < F.lit(to_ms(season.end))
        )
        items = []
        for scope in (F.lit(SCOPE_GLOBAL), region):
            name = F.concat(F.lit(f"{prefix}season:{season.id}:"), scope)
            items.append(
                _board(name, season.aggregation, to_ms(season.cutoff), season.rule)
            )
        arrays.append(
            F.when(inside, F.array(*items).cast(board_type)).otherwise(
                F.array().cast(board_type)
            )
        )
    items = []
    for window, period, cutoff in periods:
        for scope in (F.lit(SCOPE_GLOBAL), region):
            name = F.concat(F.lit(f"{prefix}{window}:"), period, F.lit(":"), scope)
            aggregation = windows.of(window).aggregation if windows else "sum"
            items.append(_board(name, aggregation, cutoff, window_rule))
    arrays.append(F.array(*items).cast(board_type))
    return F.concat(*arrays) if len(arrays) > 1 else arrays[0]


def game_board_columns(
    occurred_ms: Column,
    region: Column,
    seasons: Iterable[Season],
    window_lateness_ms: int,
    window_rule: str,
    windows: Windows | None,
    boards: BoardsConfig | None,
) -> Column:
    """:func:`board_columns` of each event's own game (the ``game`` column) when
    ``boards`` lists games; else exactly :func:`board_columns` (``seasons``: the
    game default's, with its replays' namespace seasons; another game's replays'
    are named ``<game>~<S>@<R>``, conf/rule_state.namespace_seasons)."""
    if boards is None or not boards.games:
        return board_columns(
            occurred_ms,
            region,
            [s for s in seasons if GAME_SEP not in s.id],
            window_lateness_ms,
            window_rule,
            windows,
        )
    # The extra seasons (replays' namespaces) by game, under the game's own ids.
    extra: dict[str, list[Season]] = {}
    for season in seasons:
        game, bare = split_board(season.id)
        extra.setdefault(game, []).append(
            season if bare == season.id else season.model_copy(update={"id": bare})
        )
    chosen: Column | None = None
    for game, own in boards.each_game():
        own_seasons = [*own.seasons]
        known = {s.id for s in own_seasons}
        own_seasons += [s for s in extra.get(game, []) if s.id not in known]
        array = board_columns(
            occurred_ms,
            region,
            own_seasons,
            own.window_lateness_ms,
            own.rule,
            own.windows,
            qualify(game, ""),
        )
        test = F.col("game") == F.lit(game)
        chosen = F.when(test, array) if chosen is None else chosen.when(test, array)
    assert chosen is not None
    return chosen.otherwise(F.array().cast(BOARDS_TYPE))


def transform_event_boards(
    events: DataFrame,
    seasons: Iterable[Season],
    window_lateness_ms: int = DEFAULT_LATENESS_MS,
    window_rule: str = "v1",
    windows: Windows | None = None,
) -> DataFrame:
    """Add ``boards``: every board the event feeds (needs occurred_at, region)."""
    occurred_ms = F.unix_millis(F.col("occurred_at"))
    boards = board_columns(
        occurred_ms, F.col("region"), seasons, window_lateness_ms, window_rule, windows
    )
    return events.withColumn("boards", boards)


def _not_late(received_ms: Column, cutoff_ms: Column) -> Column:
    return (cutoff_ms == 0) | (received_ms <= cutoff_ms)


NARROW = [
    "partition",
    "position",
    "player_id",
    "event_id",
    "match_id",
    "source_revision",
    "received_at_ms",
    "points",
    "occurred_at",
    "region",
    "game",
    *RECORD_COLUMNS,
]


def transform_contributions(
    events: DataFrame,
    seasons: Iterable[Season],
    window_lateness_ms: int = DEFAULT_LATENESS_MS,
    window_rule: str = "v1",
    registry: RuleRegistry | None = None,
    windows: Windows | None = None,
    boards: BoardsConfig | None = None,
) -> DataFrame:
    """Contribution per (player, match, board) from events with ``accepted``
    (``boards``: a boards file with games derives each event's game's boards).

    Columns: partition, player_id, match_id, board, aggregation, points, removed,
    position (the record that set the value), source_revision, rule (the scoring
    rule version of the board the points are under).

    Points under a board's rule are the record's recorded ``scores[rule]``, else
    computed from the match record (jobs/rules.py).

    The accepted events of a match (usually one) are gathered, with their boards,
    into a position-ordered array (after the shuffle: nothing wide is shuffled and
    non-accepted events never get boards). A match with at most ``UNROLLED``
    accepted events gets each board's value from plain expressions over the first
    ``UNROLLED`` array elements, which Spark compiles into the stage's code; a longer
    one from higher-order functions, which Spark interprets row by row (profiled at
    1 M events: interpreted evaluation was most of the recompute, see
    bench/RESULTS.md). Grouping by (player, match) needs no shuffle when the input
    is already hash-partitioned by player.
    """
    seasons = list(seasons)
    registry = registry or default_registry()
    occurred_ms = F.unix_millis(F.col("occurred_at"))
    item = F.struct(
        F.col("position"),
        F.col("partition"),
        F.col("source_revision"),
        F.col("received_at_ms"),
        F.col("points"),
        occurred_ms.alias("occurred_ms"),
        F.col("region"),
        F.col("scores"),
        F.struct(
            F.col("points"),
            F.col("placement"),
            F.col("kills"),
            F.col("duration_seconds").alias("durationSeconds"),
        ).alias("record"),
        # Derived here, on flat rows, where Spark compiles it: inside a lambda
        # (``transform`` over the gathered events) it was interpreted row by row.
        game_board_columns(
            occurred_ms,
            F.col("region"),
            seasons,
            window_lateness_ms,
            window_rule,
            windows,
            boards,
        ).alias("boards"),
    )
    # A window, not groupBy: it reuses the (player, match, position) sort of
    # transform_accepted (groupBy's ObjectHashAggregate would sort all rows again
    # once it falls back to sort-based aggregation). The last row keeps the array.
    match = Window.partitionBy("player_id", "match_id").orderBy("position")
    whole = match.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    evs = F.col("evs")
    n = F.size(evs)

    def ev(i: int) -> Column:
        # try_: no error past the end under ANSI mode (a null event instead).
        return F.try_element_at(evs, F.lit(i + 1))

    # The window hands the frame's rows to collect_list in position order, so the
    # array is normally sorted already; checked (compiled, for up to UNROLLED
    # events) and sorted with the interpreted comparator only when it is not.
    in_order = F.lit(True)
    for i in range(UNROLLED - 1):
        in_order = in_order & (
            (n <= F.lit(i + 1)) | (ev(i)["position"] < ev(i + 1)["position"])
        )
    matches = (
        events.where(F.col("accepted"))
        .select("player_id", "match_id", "position", item.alias("_e"))
        .select(
            "player_id",
            "match_id",
            F.collect_list("_e").over(whole).alias("evs"),
            F.lead("position").over(match).isNull().alias("_last"),
        )
        .where(F.col("_last"))
        .select(
            "player_id",
            "match_id",
            # By position (the structs hold a map, which has no order).
            F.when((n <= F.lit(UNROLLED)) & in_order, evs)
            .otherwise(
                F.array_sort(
                    evs,
                    lambda x, y: (
                        (x["position"] > y["position"]).cast("int")
                        - (x["position"] < y["position"]).cast("int")
                    ),
                )
            )
            .alias("evs"),
        )
    )

    def not_late(e: Column, b: Column) -> Column:
        return _not_late(e["received_at_ms"], b["cutoff_ms"])

    # Matches with up to UNROLLED accepted events (nearly all; most have one) are
    # resolved with plain expressions over evs[0..UNROLLED-1], which Spark compiles;
    # longer ones with higher-order functions, which it interprets row by row (in
    # Spark 4 every value an interpreted expression reads costs a SQLConf lookup).
    short = n <= F.lit(UNROLLED)
    b = F.col("b")

    def feeds(e: Column, board: Column) -> Column:
        return F.array_contains(e["boards"]["board"], board["board"])

    # Candidate boards: every board an event of the match names (for a long match,
    # only those it fed while not late). A candidate is kept if some event fed it
    # while not late for it: the only boards the match can hold a value on.
    candidates = (
        F.when(n == 1, ev(0)["boards"])
        .when(short, F.array_distinct(F.flatten(evs["boards"])))
        .otherwise(
            F.array_distinct(
                F.flatten(
                    F.transform(
                        "evs", lambda e: F.filter(e["boards"], lambda x: not_late(e, x))
                    )
                )
            )
        )
    )
    # Every higher-order function stays in these per-match projections (one row per
    # match), never in the explode or the per-board projection after it: an operator
    # holding one (even in a branch never taken) leaves whole-stage code generation,
    # and an interpreted explode copied the match's whole event array into each of
    # its ~8 board rows (profiled: that copy was the largest cost of the recompute,
    # bench/RESULTS.md). For a long match, ``lasts[k]`` is the 1-based index in
    # ``evs`` of the last event not late for candidate ``k`` (one exists: the
    # candidate was fed while not late).
    lasts = F.when(
        ~short,
        F.transform(
            "cands",
            lambda x: F.array_max(
                F.transform(
                    F.sequence(F.lit(1), n),
                    lambda i: F.when(not_late(F.element_at(evs, i), x), i),
                )
            ),
        ),
    )
    resolved = matches.select("player_id", "match_id", "evs", candidates.alias("cands"))
    resolved = resolved.select(
        "player_id", "match_id", "evs", "cands", lasts.alias("lasts")
    )
    # One event (most matches): its own boards, so only lateness decides (no
    # per-row array of board names to search).
    fed_early = F.lit(False)
    for i in range(UNROLLED):
        fed_early = fed_early | ((n > F.lit(i)) & not_late(ev(i), b) & feeds(ev(i), b))
    fed_early = F.when(n == 1, not_late(ev(0), b)).otherwise(fed_early)
    per_board = resolved.select(
        "player_id",
        "match_id",
        "evs",
        "lasts",
        # _outer: for a plain explode Spark infers a ``size(cands) > 0`` filter and
        # pushes it below the projections, where it re-evaluated the whole
        # candidate expression (higher-order functions included) a second time.
        F.posexplode_outer("cands").alias("k", "b"),
    ).where(b.isNotNull() & (~short | fed_early))
    # The last accepted event of the match that is not late for this board.
    last_short = F.lit(None).cast("int")
    for i in range(UNROLLED):  # the highest index wins: the latest position
        last_short = F.when(
            (n > F.lit(i)) & not_late(ev(i), b), F.lit(i + 1)
        ).otherwise(last_short)
    last = (
        F.when(n == 1, ev(0))
        .when(short, F.try_element_at(evs, last_short))
        .otherwise(
            F.try_element_at(
                evs, F.try_element_at(F.col("lasts"), F.col("k") + F.lit(1))
            )
        )
    )
    picked = per_board.select(
        "player_id", "match_id", F.col("b"), last.alias("last"), (n == 1).alias("_one")
    ).withColumn("feeds", F.col("_one") | feeds(F.col("last"), b))
    return picked.select(
        F.col("last.partition").alias("partition"),
        "player_id",
        "match_id",
        F.col("b.board").alias("board"),
        F.col("b.aggregation").alias("aggregation"),
        F.when(
            F.col("feeds"),
            points_under(
                registry, F.col("b.rule"), F.col("last.scores"), F.col("last.record")
            ),
        )
        .otherwise(F.lit(0))
        .cast("bigint")
        .alias("points"),
        (~F.col("feeds")).alias("removed"),
        F.col("last.position").alias("position"),
        F.col("last.source_revision").alias("source_revision"),
        F.col("b.rule").alias("rule"),
        F.col("last.region").alias("region"),
        # A match the board's rule cannot score (a replay under a rule reading fields
        # the record lacks) contributes nothing.
    ).where(F.col("points").isNotNull())


def transform_totals(contributions: DataFrame, asc: Column | None = None) -> DataFrame:
    """Total per (board, player): sum of contributions, or best non-removed one
    (the highest; the lowest where ``asc``, jobs/rank.py ``asc_boards``). Totals
    are real scores.

    A board has one aggregation, so grouping by it too names the same groups; it
    keeps every aggregation buffer fixed-width (``first`` of a string is not), which
    lets Spark use its compiled hash aggregate instead of sorting every
    contribution by (board, player) for a sort aggregate."""
    kept = F.when(~F.col("removed"), F.col("points"))
    return (
        contributions.groupBy("board", "player_id", "aggregation")
        .agg(
            F.coalesce(F.max(kept), F.lit(0)).alias("_best"),
            F.coalesce(F.min(kept), F.lit(0)).alias("_worst"),
            F.sum("points").alias("_sum"),
            F.count(F.lit(1)).alias("matches"),
        )
        .select(
            "board",
            "player_id",
            "aggregation",
            F.when(
                F.col("aggregation") == "max",
                F.col("_best")
                if asc is None
                else F.when(asc, F.col("_worst")).otherwise(F.col("_best")),
            )
            .otherwise(F.col("_sum"))
            .cast("bigint")
            .alias("score"),
            "matches",
        )
    )


def transform_recompute(
    bronze: DataFrame,
    boundary: Mapping[int, int],
    seasons: Iterable[Season],
    num_partitions: int | None = None,
    window_lateness_ms: int = DEFAULT_LATENESS_MS,
    window_rule: str = "v1",
    registry: RuleRegistry | None = None,
    boards: BoardsConfig | None = None,
) -> tuple[DataFrame, DataFrame]:
    """(contributions, totals) of every board from bronze up to ``boundary``;
    ``boards``: the boards file whose rolling windows' options (aggregation, order)
    apply (None: sum, desc).

    One shuffle for the whole recompute: the narrow event rows are hash-partitioned
    by player once (``num_partitions``, default spark.sql.shuffle.partitions); the
    windows and the grouping are all keyed by (player, ...), so Spark only sorts
    inside partitions after that.
    """
    bronze = with_record_columns(bronze)
    events = transform_within_boundary(bronze, boundary).select(*NARROW)
    if num_partitions is None:
        events = events.repartition("player_id")
    else:
        events = events.repartition(num_partitions, "player_id")
    # A release is not an event of its own: it makes the held record count.
    released = (
        events.where(F.col("status") == "released")
        .select("player_id", "event_id")
        .distinct()
    )
    events = events.where(F.col("status").isNull() | (F.col("status") != "released"))
    events = transform_first_acceptance(events)
    events = transform_accepted(events)
    events = transform_held(events, released)
    contributions = transform_contributions(
        events,
        seasons,
        window_lateness_ms,
        window_rule=window_rule,
        registry=registry,
        windows=None if boards is None else boards.windows,
        boards=boards,
    )
    asc = None if boards is None else asc_boards(boards)
    return contributions, transform_totals(contributions, asc)


STATE = (
    "struct<vals:map<string,struct<points:bigint,removed:boolean>>,"
    "total:bigint,achieved:bigint,present:boolean>"
)


def transform_achieved(
    bronze: DataFrame,
    boundary: Mapping[int, int],
    seasons: Iterable[Season],
    window_lateness_ms: int = DEFAULT_LATENESS_MS,
    config: BoardsConfig | None = None,
) -> DataFrame | None:
    """(board, player_id, achieved_ms) on ``tieBreak: first_achieved`` boards.

    ``achieved_ms`` is the receivedAt (the log's receivedAtMs: when the service
    accepted it, never the game server's occurredAt) of the event that set the
    player's current total: replaying the player's accepted events in log order the way
    apply_event.lua does (late ones skipped per board; a correction that moves a
    match off the board leaves 0 there), it is the time of the last event whose
    application changed the total, or of the first one applied. None when no season
    breaks ties by first achievement.
    """
    seasons = list(seasons)
    # (game, season) of every season; a boards file with games: each game's own.
    games = (
        [(DEFAULT_GAME, s) for s in seasons]
        if config is None or not config.games
        else [(g, s) for g, own in config.each_game() for s in own.seasons]
    )
    timed = [(g, s) for g, s in games if s.tie_break == "first_achieved"]
    if not timed:
        return None
    prefixes = [qualify(g, f"season:{s.id}:") for g, s in timed]
    asc_prefixes = [qualify(g, f"season:{s.id}:") for g, s in timed if s.order == "asc"]
    bronze = with_record_columns(bronze)
    events = transform_within_boundary(bronze, boundary).select(*NARROW)
    events = transform_accepted(transform_first_acceptance(events)).where(
        F.col("accepted")
    )
    occurred_ms = F.unix_millis(F.col("occurred_at"))
    boards = F.filter(
        game_board_columns(
            occurred_ms,
            F.col("region"),
            seasons,
            window_lateness_ms,
            "v1",
            None,
            config,
        ),
        lambda b: F.exists(
            F.array(*[F.lit(p) for p in prefixes]), lambda p: b["board"].startswith(p)
        ),
    )
    item = F.struct(
        F.col("position"),
        F.col("match_id"),
        F.col("points").cast("bigint").alias("points"),
        occurred_ms.alias("occurred_ms"),
        F.col("received_at_ms"),
        boards.alias("boards"),
    )
    per_player = (
        events.select("player_id", item.alias("e"))
        .where(F.size("e.boards") > 0)
        .groupBy("player_id")
        .agg(F.array_sort(F.collect_list("e")).alias("evs"))
    )
    candidates = per_player.select(
        "player_id",
        "evs",
        F.explode(
            F.array_distinct(F.flatten(F.transform("evs", lambda e: e["boards"])))
        ).alias("b"),
    )
    empty = F.map_from_arrays(
        F.array().cast("array<string>"),
        F.array().cast("array<struct<points:bigint,removed:boolean>>"),
    )
    initial = F.struct(
        empty.alias("vals"),
        F.lit(0).cast("bigint").alias("total"),
        F.lit(None).cast("bigint").alias("achieved"),
        F.lit(False).alias("present"),
    ).cast(STATE)
    b = F.col("b")

    def step(state: Column, e: Column) -> Column:
        fed = F.exists(e["boards"], lambda x: x["board"] == b["board"])
        late = (b["cutoff_ms"] > 0) & (e["received_at_ms"] > b["cutoff_ms"])
        has = F.array_contains(F.map_keys(state["vals"]), e["match_id"])
        applies = ~late & (fed | has)
        value = F.struct(
            F.when(fed, e["points"]).otherwise(F.lit(0)).cast("bigint").alias("points"),
            (~fed).alias("removed"),
        )
        vals = F.when(
            applies,
            F.map_concat(
                F.map_filter(state["vals"], lambda k, _v: k != e["match_id"]),
                F.create_map(e["match_id"], value),
            ),
        ).otherwise(state["vals"])
        kept = F.transform(
            F.filter(F.map_values(vals), lambda v: ~v["removed"]), lambda v: v["points"]
        )
        # The best match: the highest, the lowest on order: asc seasons.
        best = F.coalesce(F.array_max(kept), F.lit(0))
        if asc_prefixes:
            worst = F.coalesce(F.array_min(kept), F.lit(0))
            is_asc = F.lit(False)
            for prefix in asc_prefixes:
                is_asc = is_asc | b["board"].startswith(prefix)
            best = F.when(is_asc, worst).otherwise(best)
        total = F.when(b["aggregation"] == "max", best).otherwise(
            F.aggregate(kept, F.lit(0).cast("bigint"), lambda acc, v: acc + v)
        )
        changed = applies & (~state["present"] | (total != state["total"]))
        return F.struct(
            vals.alias("vals"),
            total.cast("bigint").alias("total"),
            F.when(changed, e["received_at_ms"])
            .otherwise(state["achieved"])
            .cast("bigint")
            .alias("achieved"),
            (state["present"] | applies).alias("present"),
        )

    folded = candidates.select(
        F.col("b.board").alias("board"),
        "player_id",
        F.aggregate("evs", initial, step).alias("s"),
    )
    return folded.where(F.col("s.present")).select(
        "board", "player_id", F.col("s.achieved").alias("achieved_ms")
    )


def with_achieved(totals: DataFrame, achieved: DataFrame | None) -> DataFrame:
    """Totals with ``achieved_ms`` (null off ``first_achieved`` boards): silver keeps
    it, so an incremental build re-ranks untouched players without their history."""
    if achieved is None:
        return totals.withColumn("achieved_ms", F.lit(None).cast("bigint"))
    return totals.join(achieved, ["board", "player_id"], "left").withColumn(
        "achieved_ms", F.col("achieved_ms").cast("bigint")
    )
