"""Award snapshots: the immutable files a closed season pays out from.

One home for the format (writer, reader, ids, hash); the serving layer's, so the
API reads it without the batch layer. The late-review queue and the adjudication
that writes version N + 1 are :mod:`speed.late_review`; the close that writes
version 1 is :mod:`jobs.season`. A season's awards live in
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from conf.boards import BoardsConfig, Season, game_of_board, season_board_prefix
from serving.files import fsync_dir, read_arrow, write_arrow
from serving.manifest import rfc3339 as rfc3339

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
    """The boards of a season (its id internal: ``<game>~S4`` for another game's)."""
    boards, _ = game_of_board(config, season.id)
    prefix = season_board_prefix(season.id)
    return [f"{prefix}{scope}" for scope in (boards or config).scopes]


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


def versions_root(data_dir: Path, season_id: str) -> str:
    """The directory a season's versions are renamed into (its mtime moves when
    one appears or goes)."""
    return os.path.join(os.fspath(data_dir), "awards", season_id)


def versions(data_dir: Path, season_id: str) -> list[int]:
    """Complete versions of a season's awards, ascending."""
    # String paths: every history read of a season board lists its versions.
    root = versions_root(data_dir, season_id)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = VERSION_DIR.match(name)
        if match and os.path.exists(os.path.join(root, name, AWARD_FILE)):
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


def decided_events(data_dir: Path, season_id: str) -> set[tuple[str, str]]:
    decided: set[tuple[str, str]] = set()
    for number in versions(data_dir, season_id):
        version = read_version(data_dir, season_id, number)
        if version is not None:
            decided |= version.adjudicated_events()
    return decided
