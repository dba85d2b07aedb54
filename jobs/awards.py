"""Award snapshots: the immutable files a closed season pays out from (no Spark here).

One home for the format (writer, reader, ids, hash). A season's awards live in
``$LB_DATA_DIR/awards/<season>/v<N>/``, outside the generation directories, so
generation retention can never remove them:

* ``<board>.arrow`` per season board (global and every region): Arrow IPC, one
  uncompressed batch, display order; ``position``, ``rank`` (int64), ``player_id``
  (utf8), ``score`` (int64), ``tier`` (utf8, null below every tier);
* ``contributions.arrow``: the season boards' contributions behind the totals
  (``player_id``, ``match_id``, ``board``, ``points``, ``removed``, ``position``),
  sorted by (player, match, board) -- what an adjudication starts from;
* ``award.json``, last: season, version, generation, boundary, closedAt, rule,
  tieBreak, rank style, tiers, per-board population and sha256, the content
  ``hash``, and for N > 1 the adjudication and its ``changes`` against N - 1.

A version directory is built under a temporary name and renamed into place, so it
exists whole or not at all; an existing version is never written again.

The content hash is sha256 over the canonical JSON of the season id, rule, tie-break,
rank style, tiers and each board file's sha256 (files are byte-reproducible). It does
not cover the generation id, boundary or closedAt: re-closing after a crash publishes
another generation with the same content and yields the same hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from conf.boards import BoardsConfig, Season, boards_for_event
from serving.files import fsync_dir, read_arrow, write_arrow
from serving.manifest import rfc3339 as rfc3339
from speed.events import parse_rfc3339

AWARD_FILE = "award.json"
CONTRIBUTIONS_FILE = "contributions.arrow"
VERSION_DIR = re.compile(r"^v([1-9][0-9]*)$")
TMP_PREFIX = ".tmp-"

AWARD_SCHEMA = pa.schema(
    [
        ("position", pa.int64()),
        ("rank", pa.int64()),
        ("player_id", pa.string()),
        ("score", pa.int64()),
        ("tier", pa.string()),
        # first_achieved seasons: when the player reached the score (epoch ms).
        ("achieved_ms", pa.int64()),
    ]
)
CONTRIBUTION_SCHEMA = pa.schema(
    [
        ("player_id", pa.string()),
        ("match_id", pa.string()),
        ("board", pa.string()),
        ("points", pa.int64()),
        ("removed", pa.bool_()),
        ("position", pa.int64()),
    ]
)


class AwardsError(RuntimeError):
    """An award snapshot cannot be built or read as asked."""


class AdjudicationInvalid(AwardsError):
    """The adjudication names events that are not pending late review."""


class AdjudicationConflict(AwardsError):
    """Another adjudication created the same version first."""


def awards_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "awards"


def season_dir(data_dir: Path, season_id: str) -> Path:
    return awards_dir(data_dir) / season_id


def season_boards(config: BoardsConfig, season: Season) -> list[str]:
    return [f"season:{season.id}:{scope}" for scope in config.scopes]


# ------------------------------------------------------------------------- reading


@dataclass
class AwardVersion:
    """One immutable award version as written (meta = award.json)."""

    season: str
    version: int
    directory: Path
    meta: dict[str, Any]
    _tables: dict[str, pa.Table] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return str(self.meta["hash"])

    @property
    def generation(self) -> str:
        return str(self.meta["generation"])

    def board(self, board: str) -> pa.Table | None:
        """The board's entries in display order; None when it had no players."""
        info = self.meta["boards"].get(board)
        if info is None:
            return None
        table = self._tables.get(board)
        if table is None:
            path = self.directory / info["file"]
            table = read_arrow(path)
            self._tables[board] = table
        return table

    def contributions(self) -> pa.Table:
        path = self.directory / CONTRIBUTIONS_FILE
        return read_arrow(path)

    def adjudicated_events(self) -> set[tuple[str, str]]:
        """(playerId, eventId) decided by this version's adjudication."""
        adjudication = self.meta.get("adjudication") or {}
        return {
            (p, e)
            for key in ("accepted", "rejected")
            for p, e in adjudication.get(key, [])
        }


def versions(data_dir: Path, season_id: str) -> list[int]:
    """Complete versions of a season's awards, ascending."""
    root = season_dir(data_dir, season_id)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = VERSION_DIR.match(name)
        if match and (root / name / AWARD_FILE).exists():
            found.append(int(match.group(1)))
    return sorted(found)


def read_version(
    data_dir: Path, season_id: str, version: int | None = None
) -> AwardVersion | None:
    """A version (the latest when None); None when the season has no awards."""
    known = versions(data_dir, season_id)
    if not known:
        return None
    number = known[-1] if version is None else version
    if number not in known:
        return None
    directory = season_dir(data_dir, season_id) / f"v{number}"
    meta = orjson.loads((directory / AWARD_FILE).read_bytes())
    return AwardVersion(season_id, number, directory, meta)


def award_generations(data_dir: Path) -> set[str]:
    """Generation ids that award snapshots were taken from (kept by retention)."""
    root = awards_dir(data_dir)
    found: set[str] = set()
    if not root.is_dir():
        return found
    for season in os.listdir(root):
        for number in versions(data_dir, season):
            version = read_version(data_dir, season, number)
            if version is not None:
                found.add(version.generation)
    return found


# ------------------------------------------------------------------------- writing


def rank_board(
    players: pa.Array,
    scores: pa.Array,
    season: Season,
    achieved: pa.Array | None = None,
) -> pa.Table:
    """Entries of one board in display order with ranks and tiers.

    Display order: score descending, then (``tieBreak: first_achieved``) the time
    the player reached it, then player id ascending (UTF-8 bytes; Arrow sorts strings
    by bytes). Rank: competition rank, 1 + players with a strictly higher score, or
    the position with ``rank: unique``.
    """
    timed = season.tie_break == "first_achieved"
    if achieved is None:
        achieved = pa.nulls(len(players), pa.int64())
    data = pa.table(
        [players, scores, achieved.cast(pa.int64())],
        names=["player_id", "score", "achieved_ms"],
    )
    keys = [("score", "descending")]
    if timed:
        keys.append(("achieved_ms", "ascending"))
    order = pc.sort_indices(data, sort_keys=[*keys, ("player_id", "ascending")])
    data = data.take(order)
    values = data.column("score").to_numpy(zero_copy_only=False)
    n = len(values)
    positions = np.arange(1, n + 1, dtype=np.int64)
    # Rank = position of the first row with the same score (rows are sorted).
    starts = np.ones(n, dtype=bool)
    if n:
        starts[1:] = values[1:] != values[:-1]
    ranks = np.maximum.accumulate(np.where(starts, positions, 0)) if n else positions
    if season.rank == "unique":
        ranks = positions
    tiers = (
        [season.tier_of(int(r), n) for r in ranks.tolist()]
        if season.tiers
        else [None] * n
    )
    return pa.table(
        [
            pa.array(positions, pa.int64()),
            pa.array(ranks, pa.int64()),
            data.column("player_id").combine_chunks().cast(pa.string()),
            data.column("score").combine_chunks().cast(pa.int64()),
            pa.array(tiers, pa.string()),
            data.column("achieved_ms").combine_chunks(),
        ],
        schema=AWARD_SCHEMA,
    )


def content_hash(season: Season, board_sums: Mapping[str, str]) -> str:
    body = {
        "season": season.id,
        "rule": season.rule,
        "tieBreak": season.tie_break,
        "rank": season.rank,
        "tiers": [t.model_dump(by_alias=True, exclude_none=True) for t in season.tiers],
        "boards": dict(sorted(board_sums.items())),
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_version(
    data_dir: Path,
    season: Season,
    version: int,
    boards: Mapping[str, pa.Table],
    contributions: pa.Table,
    *,
    generation: str,
    boundary: Mapping[str, int],
    closed_at: datetime,
    extra: Mapping[str, Any] | None = None,
    fail_before_rename: bool = False,
) -> AwardVersion:
    """Write version ``version`` whole (temp dir, then rename) and return it.

    :raises AdjudicationConflict: when that version already exists.
    """
    root = season_dir(data_dir, season.id)
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"v{version}"
    if (target / AWARD_FILE).exists():
        raise AdjudicationConflict(f"{season.id} award version {version} exists")
    tmp = root / f"{TMP_PREFIX}v{version}-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        sums: dict[str, str] = {}
        meta_boards: dict[str, Any] = {}
        for board in sorted(boards):
            table = boards[board]
            name = f"{board}.arrow"
            sums[board] = write_arrow(tmp / name, table)
            meta_boards[board] = {
                "population": table.num_rows,
                "file": name,
                "sha256": sums[board],
            }
        order = pc.sort_indices(
            contributions,
            sort_keys=[
                ("player_id", "ascending"),
                ("match_id", "ascending"),
                ("board", "ascending"),
            ],
        )
        contributions_sum = write_arrow(
            tmp / CONTRIBUTIONS_FILE,
            contributions.take(order)
            .select(CONTRIBUTION_SCHEMA.names)
            .cast(CONTRIBUTION_SCHEMA),
        )
        meta: dict[str, Any] = {
            "season": season.id,
            "version": version,
            "generation": generation,
            "boundary": {str(k): int(v) for k, v in sorted(boundary.items())},
            "closedAt": rfc3339(closed_at),
            "rule": season.rule,
            "tieBreak": season.tie_break,
            "rank": season.rank,
            "tiers": [
                t.model_dump(by_alias=True, exclude_none=True) for t in season.tiers
            ],
            "boards": meta_boards,
            "contributions": {"file": CONTRIBUTIONS_FILE, "sha256": contributions_sum},
            "hash": content_hash(season, sums),
            "adjudication": None,
            "changes": [],
        }
        meta.update(extra or {})
        text = json.dumps(meta, indent=1, sort_keys=True) + "\n"
        with (tmp / AWARD_FILE).open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(tmp)
        if fail_before_rename:
            raise AwardsError("aborted before the award version was renamed in")
        try:
            os.rename(tmp, target)
        except OSError:
            raise AdjudicationConflict(
                f"{season.id} award version {version} was created concurrently"
            ) from None
        fsync_dir(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    written = read_version(data_dir, season.id, version)
    assert written is not None
    return written


def clean_partial(data_dir: Path, season_id: str) -> None:
    """Remove temporary directories a crashed writer left (never a version)."""
    root = season_dir(data_dir, season_id)
    if not root.is_dir():
        return
    for entry in root.iterdir():
        if entry.name.startswith(TMP_PREFIX):
            shutil.rmtree(entry, ignore_errors=True)


# -------------------------------------------------------------------- late review


def late_boards(record: Mapping[str, Any], season_id: str) -> list[str]:
    """Season boards on which a log record was held as ``late-review``."""
    prefix = f"season:{season_id}:"
    status = record.get("status")
    boards = (record.get("result") or {}).get("boards") or []
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
    for item in (record.get("result") or {}).get("boards") or []:
        board = str(item.get("board", ""))
        if board.startswith("season:") and item.get("status", status) == "late-review":
            seasons.add(board.split(":")[1])
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


def decided_events(data_dir: Path, season_id: str) -> set[tuple[str, str]]:
    decided: set[tuple[str, str]] = set()
    for number in versions(data_dir, season_id):
        version = read_version(data_dir, season_id, number)
        if version is not None:
            decided |= version.adjudicated_events()
    return decided


# ------------------------------------------------------------------- adjudication


def _totals(aggregation: str, values: list[tuple[int, bool]]) -> int:
    kept = [points for points, removed in values if not removed]
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
    prefix = f"season:{season.id}:"
    aggregation = season.aggregation

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
        return _totals(aggregation, values)

    for record in accepted:
        event = record["event"]
        player, match = event["playerId"], event["matchId"]
        feeds = {
            s.board
            for s in boards_for_event(
                config, parse_rfc3339(event["occurredAt"]), event["region"]
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
            occurred = int(parse_rfc3339(event["occurredAt"]).timestamp() * 1000)
            if prior is None or prior[0] != total:
                standing[(board, player)] = (total, occurred)

    new_totals: dict[str, dict[str, int]] = defaultdict(dict)
    per_player: dict[tuple[str, str], list[tuple[int, bool]]] = defaultdict(list)
    for (player, _match, board), (points, removed, _pos) in state.items():
        per_player[(board, player)].append((points, removed))
    for (board, player), values in per_player.items():
        new_totals[board][player] = _totals(aggregation, values)

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
                        "oldScore": before[0] if before else None,
                        "newScore": score,
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
