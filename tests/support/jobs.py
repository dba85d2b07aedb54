"""Inline bronze rows and a slow pure-Python oracle of the Lua semantics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from conf.boards import BoardsConfig, boards_for_event

BRONZE_SCHEMA = T.StructType(
    [
        T.StructField("partition", T.IntegerType()),
        T.StructField("position", T.LongType()),
        T.StructField("received_at_ms", T.LongType()),
        T.StructField("event_id", T.StringType()),
        T.StructField("player_id", T.StringType()),
        T.StructField("match_id", T.StringType()),
        T.StructField("source_revision", T.LongType()),
        T.StructField("occurred_at", T.TimestampType()),
        T.StructField("region", T.StringType()),
        T.StructField("points", T.LongType()),
    ]
)

NOW_MS = 1_764_000_000_000


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@dataclass
class Ev:
    """One logged record; positions are assigned per partition in list order."""

    player: str
    match: str
    revision: int
    points: int
    occurred: str = "2026-11-20T10:00:00Z"
    region: str = "eu"
    received_ms: int = NOW_MS
    event_id: str | None = None
    partition: int = 0


def log_records(events: Sequence[Ev]) -> list[dict[str, Any]]:
    """The log records (as the speed layer writes them) of inline events."""
    positions: dict[int, int] = defaultdict(int)
    out = []
    for i, e in enumerate(events):
        positions[e.partition] += 1
        out.append(
            {
                "partition": e.partition,
                "position": positions[e.partition],
                "receivedAtMs": e.received_ms,
                "event": {
                    "eventId": e.event_id or f"E{i}",
                    "playerId": e.player,
                    "matchId": e.match,
                    "sourceRevision": e.revision,
                    "occurredAt": e.occurred,
                    "region": e.region,
                    "points": e.points,
                },
            }
        )
    return out


def bronze(spark: SparkSession, events: Sequence[Ev]) -> DataFrame:
    rows = [
        (
            r["partition"],
            r["position"],
            r["receivedAtMs"],
            r["event"]["eventId"],
            r["event"]["playerId"],
            r["event"]["matchId"],
            r["event"]["sourceRevision"],
            ts(r["event"]["occurredAt"]),
            r["event"]["region"],
            r["event"]["points"],
        )
        for r in log_records(events)
    ]
    return spark.createDataFrame(rows, BRONZE_SCHEMA)


def oracle_totals(config: BoardsConfig, records: Iterable[dict[str, Any]]) -> dict:
    """Replay logged records in position order the way apply_event.lua does.

    ``records``: dicts with partition, position, receivedAtMs and event (log JSON).
    Returns {board: {player: total}}: real totals (a best-of board keeps the
    highest contribution, the lowest on an ``order: asc`` board).
    """
    seen: set[tuple[str, str]] = set()
    revision: dict[tuple[str, str], int] = {}
    applied: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    aggregation: dict[str, str] = {}
    order: dict[str, str] = {}
    cutoff: dict[str, int] = {}
    ordered = sorted(records, key=lambda r: (r["partition"], r["position"]))
    for rec in ordered:
        ev = rec["event"]
        ident = (ev["playerId"], ev["eventId"])
        if ident in seen:
            continue
        seen.add(ident)
        key = (ev["playerId"], ev["matchId"])
        if key in revision and ev["sourceRevision"] <= revision[key]:
            continue
        revision[key] = ev["sourceRevision"]
        specs = boards_for_event(config, ts(ev["occurredAt"]), ev["region"])
        feeds = {s.board for s in specs}
        for s in specs:
            aggregation[s.board] = s.aggregation
            order[s.board] = s.order
            cutoff[s.board] = s.cutoff_ms
        for board in feeds | set(applied[key]):
            late = cutoff[board] > 0 and rec["receivedAtMs"] > cutoff[board]
            if late:
                continue
            applied[key][board] = ev["points"] if board in feeds else -1
    per_board: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (player, _match), boards in applied.items():
        for board, value in boards.items():
            per_board[board][player].append(value)
    totals: dict[str, dict[str, int]] = {}
    for board, players in per_board.items():
        if aggregation[board] == "max":
            best = min if order[board] == "asc" else max
            totals[board] = {
                p: best([v for v in vs if v >= 0], default=0)
                for p, vs in players.items()
            }
        else:
            totals[board] = {p: sum(max(v, 0) for v in vs) for p, vs in players.items()}
    return totals


def oracle_ranking(
    totals: dict[str, int], asc: bool = False
) -> list[tuple[int, int, str, int]]:
    """(position, rank, player, score) by a slow full sort (UTF-8 byte order);
    ``asc``: lower scores are better."""
    sign = -1 if asc else 1
    order = sorted(
        totals.items(), key=lambda kv: (-sign * kv[1], kv[0].encode("utf-8"))
    )
    out = []
    for i, (player, score) in enumerate(order):
        rank = 1 + sum(1 for s in totals.values() if sign * s > sign * score)
        out.append((i + 1, rank, player, score))
    return out


def oracle_first_achieved(
    config: BoardsConfig, records: Iterable[dict[str, Any]]
) -> dict[str, dict[str, tuple[int, int]]]:
    """Replay records one by one with running totals: {board: {player: (total,
    achievedMs)}}, achievedMs being the receivedAt (when the service accepted it,
    never its occurredAt) of the last event that changed the player's total there
    (or of its first). Independent of oracle_totals on purpose."""
    seen: set[tuple[str, str]] = set()
    revision: dict[tuple[str, str], int] = {}
    # (player, match) -> board -> (points, removed)
    values: dict[tuple[str, str], dict[str, tuple[int, bool]]] = defaultdict(dict)
    standing: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    aggregation: dict[str, str] = {}
    for rec in sorted(records, key=lambda r: (r["partition"], r["position"])):
        ev = rec["event"]
        if (ev["playerId"], ev["eventId"]) in seen:
            continue
        seen.add((ev["playerId"], ev["eventId"]))
        key = (ev["playerId"], ev["matchId"])
        if key in revision and ev["sourceRevision"] <= revision[key]:
            continue
        revision[key] = ev["sourceRevision"]
        occurred = ts(ev["occurredAt"])
        specs = {s.board: s for s in boards_for_event(config, occurred, ev["region"])}
        for board in set(specs) | set(values[key]):
            spec = specs.get(board)
            if spec is not None:
                aggregation[board] = spec.aggregation
                cutoff = spec.cutoff_ms
            else:
                cutoff = next(
                    (
                        int(s.cutoff.timestamp() * 1000)
                        for s in config.seasons
                        if board.startswith(f"season:{s.id}:")
                    ),
                    0,
                )
            if cutoff > 0 and rec["receivedAtMs"] > cutoff:
                continue
            values[key][board] = (ev["points"], False) if spec else (0, True)
            player = ev["playerId"]
            kept = [
                v[board][0]
                for (p, _), v in values.items()
                if p == player and board in v and not v[board][1]
            ]
            if aggregation[board] == "max":
                total = max(kept, default=0)
            else:
                total = sum(kept)
            before = standing[board].get(player)
            if before is None or before[0] != total:
                standing[board][player] = (total, int(rec["receivedAtMs"]))
    return standing


def oracle_order(
    standing: dict[str, tuple[int, int]], unique: bool = False
) -> list[tuple[int, int, str, int]]:
    """(position, rank, player, score) by score desc, achievedMs asc, player bytes."""
    order = sorted(
        standing.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0].encode("utf-8"))
    )
    out = []
    for i, (player, (score, _)) in enumerate(order):
        rank = (
            i + 1 if unique else 1 + sum(1 for s, _ in standing.values() if s > score)
        )
        out.append((i + 1, rank, player, score))
    return out
