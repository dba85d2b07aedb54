"""Late review: events a season held after its cutoff, and their adjudication.

An event whose season board was past its cutoff when it arrived is logged with the
item status ``late-review`` and applied nowhere on that board. Landing copies such
log records into the season's late-review hash (:func:`late_review_key`) before the
log is trimmed; ``GET /v1/admin/seasons/{id}/late-events`` lists those not yet
decided, and an adjudication (:func:`adjudicate`) accepts or rejects them into award
version N + 1, written through :mod:`serving.awards` (the file format's home).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from conf.boards import (
    BoardsConfig,
    Season,
    boards_for_event,
    qualify,
    season_board_prefix,
    season_rules,
    split_board,
)
from serving.awards import (
    CONTRIBUTION_SCHEMA,
    AdjudicationInvalid,
    AwardsError,
    AwardVersion,
    rank_board,
    read_version,
    season_boards,
    write_version,
)
from serving.log_records import board_items
from serving.manifest import rfc3339
from speed.events import parse_rfc3339

# -------------------------------------------------------------------- late review


def late_boards(record: Mapping[str, Any], season_id: str) -> list[str]:
    """Season boards on which a log record was held as ``late-review``."""
    prefix = season_board_prefix(season_id)
    status = record.get("status")
    boards = board_items(record.get("result") or {})
    return [
        item["board"]
        for item in boards
        if str(item.get("board", "")).startswith(prefix)
        and item.get("status", status) == "late-review"
    ]


def late_seasons(record: Mapping[str, Any]) -> set[str]:
    """Seasons whose boards held this record as ``late-review``."""
    status = record.get("status")
    seasons = set()
    for item in board_items(record.get("result") or {}):
        # Another game's season is queued under its qualified id (arena~S4).
        game, board = split_board(str(item.get("board", "")))
        if board.startswith("season:") and item.get("status", status) == "late-review":
            seasons.add(qualify(game, board.split(":")[1]))
    return seasons


def late_item(record: Mapping[str, Any]) -> dict[str, Any]:
    """The late-review listing of a log record (API.md fields plus ids)."""
    event = record["event"]
    received = datetime.fromtimestamp(int(record["receivedAtMs"]) / 1000, UTC)
    return {
        "eventId": event["eventId"],
        "playerId": event["playerId"],
        "matchId": event["matchId"],
        "occurredAt": event["occurredAt"],
        "receivedAt": rfc3339(received),
        "points": event["points"],
        "kind": event.get("kind", "result"),
        "reason": event.get("reason"),
        "sourceRevision": event["sourceRevision"],
        "partition": record["partition"],
        "position": record["position"],
    }


def pending_late(
    records: Iterable[Mapping[str, Any]], season_id: str, decided: set[tuple[str, str]]
) -> list[Mapping[str, Any]]:
    """Late-review records of the season not yet adjudicated, in log order."""
    seen: set[tuple[int, int]] = set()
    out = []
    for record in records:
        key = (int(record["partition"]), int(record["position"]))
        if key in seen or not late_boards(record, season_id):
            continue
        seen.add(key)
        event = record["event"]
        if (event["playerId"], event["eventId"]) in decided:
            continue
        out.append(record)
    return sorted(out, key=lambda r: (int(r["partition"]), int(r["position"])))


# ------------------------------------------------------------------- adjudication


def _totals(aggregation: str, values: list[tuple[int, bool]], sign: int = 1) -> int:
    """The oriented total (award snapshots hold oriented scores, conf/boards.py
    BoardRules) of real contributions."""
    kept = [sign * points for points, removed in values if not removed]
    if aggregation == "max":
        return max(kept, default=0)
    return sum(kept)


def adjudicate(
    data_dir: Path,
    config: BoardsConfig,
    season: Season,
    pending: Sequence[Mapping[str, Any]],
    accept: list[str],
    reject: list[str],
    reason: str,
    actor: str,
    now: datetime | None = None,
) -> AwardVersion:
    """Create award version N + 1 from version N and the decided late events.

    An accepted late event counts on the season boards as if it had arrived in time:
    per (player, match, board) the contribution is that of the last (by log position)
    of the version-N contribution and the accepted events; a board the last event
    does not feed keeps the player with 0 (as a correction moving a match away).
    Totals follow the board's aggregation; ranks and tiers are recomputed for the
    whole board. Rejected events change nothing. Version N is never touched.

    :raises AdjudicationInvalid: an id is unknown, pending for no one, or both
        accepted and rejected; or nothing is decided.
    """
    if not reason or not reason.strip():
        raise AdjudicationInvalid("reason is required")
    if not accept and not reject:
        raise AdjudicationInvalid("accept or reject at least one event")
    both = set(accept) & set(reject)
    if both:
        raise AdjudicationInvalid(f"both accepted and rejected: {sorted(both)}")
    current = read_version(data_dir, season.id)
    if current is None:
        raise AwardsError(f"season {season.id} has no award snapshot yet")
    by_event: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in pending:
        by_event[record["event"]["eventId"]].append(record)
    unknown = sorted(e for e in set(accept) | set(reject) if e not in by_event)
    if unknown:
        raise AdjudicationInvalid(
            f"not pending late review for season {season.id}: {', '.join(unknown)}"
        )
    accepted = sorted(
        (r for e in set(accept) for r in by_event[e]),
        key=lambda r: (int(r["partition"]), int(r["position"])),
    )
    rejected = [r for e in set(reject) for r in by_event[e]]
    prefix = season_board_prefix(season.id)
    game = split_board(season.id)[0]
    aggregation = season.aggregation
    sign = season_rules(season).sign

    # The affected players' contributions of version N.
    players = {r["event"]["playerId"] for r in accepted}
    # Typed: with no event accepted (reject only) an untyped empty array is of
    # null type, which is_in refuses against the string column.
    affected = pa.array(sorted(players), pa.string())
    contributions = current.contributions()
    mask = pc.is_in(contributions.column("player_id"), affected)
    rows = contributions.filter(mask).to_pylist() if players else []
    state: dict[tuple[str, str, str], tuple[int, bool, int]] = {
        (r["player_id"], r["match_id"], r["board"]): (
            r["points"],
            r["removed"],
            r["position"],
        )
        for r in rows
    }
    # Where each affected player stands (total, achieved) as of version N.
    standing: dict[tuple[str, str], tuple[int, int | None]] = {}
    for board in season_boards(config, season):
        old = current.board(board)
        if old is None:
            continue
        mask_board = pc.is_in(old.column("player_id"), affected)
        for row in old.filter(mask_board).to_pylist():
            standing[(board, row["player_id"])] = (row["score"], row["achieved_ms"])

    def total_of(board: str, player: str) -> int:
        values = [
            (pts, rem)
            for (p, _m, b), (pts, rem, _pos) in state.items()
            if p == player and b == board
        ]
        return _totals(aggregation, values, sign)

    for record in accepted:
        event = record["event"]
        player, match = event["playerId"], event["matchId"]
        feeds = {
            s.board
            for s in boards_for_event(
                config, parse_rfc3339(event["occurredAt"]), event["region"], game
            )
            if s.board.startswith(prefix)
        }
        touched = feeds | {b for (p, m, b) in state if p == player and m == match}
        for board in touched:
            if board in feeds:
                state[(player, match, board)] = (
                    int(event["points"]),
                    False,
                    int(record["position"]),
                )
            else:
                state[(player, match, board)] = (0, True, int(record["position"]))
            # As apply_event.lua: the event sets the achieved time when it changes
            # the total (or is the player's first on the board).
            total = total_of(board, player)
            prior = standing.get((board, player))
            # The time is the acceptance's (receivedAt), never occurredAt.
            received = int(record["receivedAtMs"])
            if prior is None or prior[0] != total:
                standing[(board, player)] = (total, received)

    new_totals: dict[str, dict[str, int]] = defaultdict(dict)
    per_player: dict[tuple[str, str], list[tuple[int, bool]]] = defaultdict(list)
    for (player, _match, board), (points, removed, _pos) in state.items():
        per_player[(board, player)].append((points, removed))
    for (board, player), values in per_player.items():
        new_totals[board][player] = _totals(aggregation, values, sign)

    boards: dict[str, pa.Table] = {}
    changes: list[dict[str, Any]] = []
    for board in season_boards(config, season):
        old = current.board(board)
        old_rows: dict[str, tuple[int, int, str | None]] = {}
        if old is not None:
            for player, score, rank, tier in zip(
                old.column("player_id").to_pylist(),
                old.column("score").to_pylist(),
                old.column("rank").to_pylist(),
                old.column("tier").to_pylist(),
                strict=True,
            ):
                old_rows[player] = (score, rank, tier)
        updates = new_totals.get(board, {})
        if old is None and not updates:
            continue
        scores = {p: s for p, (s, _, _) in old_rows.items()}
        scores.update(updates)
        times: dict[str, int | None] = {}
        if old is not None:
            times = dict(
                zip(
                    old.column("player_id").to_pylist(),
                    old.column("achieved_ms").to_pylist(),
                    strict=True,
                )
            )
        for player in updates:
            times[player] = standing.get((board, player), (0, None))[1]
        table = rank_board(
            pa.array(list(scores), pa.string()),
            pa.array(list(scores.values()), pa.int64()),
            season,
            pa.array([times.get(p) for p in scores], pa.int64()),
        )
        boards[board] = table
        for player, score, rank, tier in zip(
            table.column("player_id").to_pylist(),
            table.column("score").to_pylist(),
            table.column("rank").to_pylist(),
            table.column("tier").to_pylist(),
            strict=True,
        ):
            before = old_rows.get(player)
            if before is None or before != (score, rank, tier):
                changes.append(
                    {
                        "board": board,
                        "playerId": player,
                        # Real scores (the snapshot's are oriented).
                        "oldScore": sign * before[0] if before else None,
                        "newScore": sign * score,
                        "oldRank": before[1] if before else None,
                        "newRank": rank,
                        "oldTier": before[2] if before else None,
                        "newTier": tier,
                    }
                )
    # Carry every other contribution over unchanged.
    others = contributions.filter(pc.invert(mask)) if players else contributions
    changed_rows = pa.Table.from_pylist(
        [
            {
                "player_id": p,
                "match_id": m,
                "board": b,
                "points": pts,
                "removed": rem,
                "position": pos,
            }
            for (p, m, b), (pts, rem, pos) in sorted(state.items())
        ],
        schema=CONTRIBUTION_SCHEMA,
    )
    merged = pa.concat_tables([others.cast(CONTRIBUTION_SCHEMA), changed_rows])
    moment = now or datetime.now(UTC)

    def ids(records: list[Mapping[str, Any]]) -> list[list[str]]:
        return sorted([r["event"]["playerId"], r["event"]["eventId"]] for r in records)

    extra = {
        "adjudication": {
            "actor": actor,
            "reason": reason,
            "at": rfc3339(moment),
            "accepted": ids(accepted),
            "rejected": ids(rejected),
            "basedOn": current.version,
        },
        "changes": changes,
    }
    return write_version(
        data_dir,
        season,
        current.version + 1,
        boards,
        merged,
        generation=current.generation,
        boundary=current.meta["boundary"],
        closed_at=parse_rfc3339(current.meta["closedAt"]),
        extra=extra,
    )


def late_review_key(season_id: str) -> str:
    """Hash ``<partition>:<position>`` -> log record of events the season holds for
    review, copied there by landing before the log is trimmed."""
    return f"lb:{{late}}:{season_id}"


def record_key(record: Mapping[str, Any]) -> str:
    return f"{int(record['partition'])}:{int(record['position'])}"


def queue_late_records(lines: Iterable[bytes]) -> dict[str, dict[str, bytes]]:
    """Season -> {record key: record JSON} for late-review records among log lines."""
    out: dict[str, dict[str, bytes]] = defaultdict(dict)
    for line in lines:
        if b"late-review" not in line:
            continue
        record = orjson.loads(line)
        for season_id in late_seasons(record):
            out[season_id][record_key(record)] = line.rstrip(b"\n")
    return out
