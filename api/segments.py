"""Published generations as the API sees them: memory-mapped serving segments.

A generation directory ``<segments_dir>/<gen>/`` holds, per board, an Arrow IPC file in
display order (``player_id``, ``score``; row i is position i+1), a player-id index (row
numbers sorted by player id) and the equi-depth buckets of the Fenwick histogram. The
generation exists for the API once its ``manifest.json`` is there (written last).

Every lookup is a binary search over the mapped columns: O(log n), no network hop.
"""

from __future__ import annotations

import bisect
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

GENERATION_ID = re.compile(r"^g([1-9][0-9]{0,17})$")
REFRESH_SECONDS = 0.5


def generation_number(generation_id: str) -> int | None:
    match = GENERATION_ID.match(generation_id)
    return int(match.group(1)) if match else None


def _read_table(path: Path) -> pa.Table:
    reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
    table = reader.read_all()
    # One chunk per column keeps lookups simple; segments are written as one batch,
    # so this is normally free.
    return (
        table.combine_chunks()
        if any(c.num_chunks > 1 for c in table.columns)
        else table
    )


class _StringColumn:
    """Zero-copy access to the UTF-8 bytes of one Arrow string column."""

    def __init__(self, array: pa.Array) -> None:
        if isinstance(array, pa.ChunkedArray):
            array = array.chunk(0) if array.num_chunks else pa.array([], pa.string())
        large = pa.types.is_large_string(array.type)
        buffers = array.buffers()
        dtype = np.int64 if large else np.int32
        count = len(array) + 1
        offsets = (
            np.frombuffer(buffers[1], dtype=dtype) if buffers[1] else np.zeros(1, dtype)
        )
        self.offsets = offsets[array.offset : array.offset + count]
        self.data = (
            memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
        )
        self.length = len(array)

    def bytes_at(self, row: int) -> bytes:
        return bytes(self.data[self.offsets[row] : self.offsets[row + 1]])

    def str_at(self, row: int) -> str:
        return self.bytes_at(row).decode("utf-8")


@dataclass
class BoardSegment:
    """One board of one generation, in display order (score desc, player id asc)."""

    board: str
    players: _StringColumn
    scores: np.ndarray
    index: np.ndarray
    bucket_lowers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bucket_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Encoded first rows (enc(score) + player id), filled by live top reads.
    encoded_prefix: list[bytes] = field(default_factory=list)
    # Shadowed players' scores (jobs/shadow.py): not on the board, but their own
    # rank read answers as if they were.
    hidden: dict[str, int] = field(default_factory=dict)
    # first_achieved boards: when each row's player reached its score (epoch ms),
    # the tie-break between score and player id; None on player_id boards.
    achieved: np.ndarray | None = None
    # rank: unique -- a row's rank is its position.
    unique_rank: bool = False

    @classmethod
    def load(cls, directory: Path, board: str, meta: dict[str, Any]) -> BoardSegment:
        table = _read_table(directory / meta.get("file", f"{board}.arrow"))
        index = _read_table(directory / meta.get("index", f"{board}.index.arrow"))
        segment = cls(
            board=board,
            players=_StringColumn(table.column("player_id")),
            scores=table.column("score").to_numpy(),
            index=index.column("row").to_numpy(),
            achieved=table.column("achieved_ms").to_numpy()
            if "achieved_ms" in table.column_names
            else None,
            unique_rank=meta.get("rank") == "unique",
        )
        if meta.get("hidden"):
            hidden = _read_table(directory / meta["hidden"])
            segment.hidden = dict(
                zip(
                    hidden.column("player_id").to_pylist(),
                    hidden.column("score").to_pylist(),
                    strict=True,
                )
            )
        buckets_file = directory / meta.get("buckets", f"{board}.buckets.arrow")
        if buckets_file.exists():
            buckets = _read_table(buckets_file)
            segment.bucket_lowers = buckets.column("lower").to_numpy()
            segment.bucket_counts = buckets.column("count").to_numpy()
        return segment

    @property
    def population(self) -> int:
        return int(len(self.scores))

    def row_of(self, player_id: str) -> int | None:
        """Display row of a player (bisect over the player-id index), None if absent."""
        key = player_id.encode("utf-8")
        index = self.index
        lo = bisect.bisect_left(
            range(len(index)), key, key=lambda i: self.players.bytes_at(int(index[i]))
        )
        if lo < len(index):
            row = int(index[lo])
            if self.players.bytes_at(row) == key:
                return row
        return None

    def count_above(self, score: int) -> int:
        """Number of players with a strictly higher score (scores are descending)."""
        scores = self.scores
        return bisect.bisect_left(
            range(len(scores)), -score, key=lambda i: -int(scores[i])
        )

    def rank_of_score(self, score: int) -> int:
        """Competition rank of a score: 1 + players strictly above it."""
        return self.count_above(score) + 1

    def _order_key(self, i: int) -> tuple[int, int, bytes]:
        achieved = int(self.achieved[i]) if self.achieved is not None else 0
        return (-int(self.scores[i]), achieved, self.players.bytes_at(i))

    def first_row_after(
        self, score: int, player_id: str, achieved: int | None = None
    ) -> int:
        """First display row strictly after the ordering tuple (score, [achieved,]
        player id)."""
        key = (-score, achieved or 0, player_id.encode("utf-8"))
        return bisect.bisect_right(range(self.population), key, key=self._order_key)

    def first_row_at_or_after(
        self, score: int, player_id: str, achieved: int | None = None
    ) -> int:
        key = (-score, achieved or 0, player_id.encode("utf-8"))
        return bisect.bisect_left(range(self.population), key, key=self._order_key)

    def entry(self, row: int) -> dict[str, Any]:
        score = int(self.scores[row])
        return {
            "position": row + 1,
            "rank": row + 1 if self.unique_rank else self.rank_of_score(score),
            "playerId": self.players.str_at(row),
            "score": score,
        }

    def entries(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Rows [start, stop) in display order with their competition ranks."""
        start, stop = max(0, start), min(self.population, stop)
        out: list[dict[str, Any]] = []
        rank = 0
        previous: int | None = None
        for row in range(start, stop):
            score = int(self.scores[row])
            if self.unique_rank:
                rank = row + 1
            elif score != previous:
                rank = self.rank_of_score(score)
                previous = score
            out.append(
                {
                    "position": row + 1,
                    "rank": rank,
                    "playerId": self.players.str_at(row),
                    "score": score,
                }
            )
        return out


@dataclass
class Generation:
    """A published generation: its manifest and lazily mapped board segments."""

    id: str
    number: int
    directory: Path
    manifest: dict[str, Any]
    _boards: dict[str, BoardSegment] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def header(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "publishedAt": self.manifest.get("publishedAt"),
            "boundary": self.manifest.get("boundary", {}),
            "complete": bool(self.manifest.get("complete", False)),
        }

    @property
    def boundary(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.manifest.get("boundary", {}).items()}

    def board_names(self) -> list[str]:
        return sorted(self.manifest.get("boards", {}))

    def board(self, board: str) -> BoardSegment | None:
        """The board's segment; None when the board is empty in this generation."""
        segment = self._boards.get(board)
        if segment is not None:
            return segment
        meta = self.manifest.get("boards", {}).get(board)
        if meta is None:
            return None
        with self._lock:
            if board not in self._boards:
                self._boards[board] = BoardSegment.load(self.directory, board, meta)
            return self._boards[board]


class GenerationExpiredError(Exception):
    def __init__(self, generation_id: str, latest: str | None) -> None:
        super().__init__(generation_id)
        self.generation_id = generation_id
        self.latest = latest


class GenerationNotFoundError(Exception):
    pass


class GenerationRegistry:
    """Notices new generations (re-scans at most every REFRESH_SECONDS) and keeps the
    newest ``retained`` of them mapped; older ones answer GenerationExpired."""

    def __init__(self, segments_dir: Path, retained: int) -> None:
        self.segments_dir = Path(segments_dir)
        self.retained = retained
        self._generations: dict[int, Generation] = {}
        # Older generations mapped on demand by by_number (bases not yet rebased).
        self._extra: dict[int, Generation] = {}
        self._last_scan = 0.0
        self._lock = threading.Lock()

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_scan < REFRESH_SECONDS:
            return
        with self._lock:
            self._last_scan = now
            found: dict[int, Path] = {}
            try:
                entries = list(os.scandir(self.segments_dir))
            except FileNotFoundError:
                entries = []
            for entry in entries:
                number = generation_number(entry.name)
                if number is not None and os.path.exists(
                    os.path.join(entry.path, "manifest.json")
                ):
                    found[number] = Path(entry.path)
            keep = sorted(found)[-self.retained :]
            generations: dict[int, Generation] = {}
            for number in keep:
                known = self._generations.get(number)
                if known is not None:
                    generations[number] = known
                    continue
                try:
                    manifest = orjson.loads(
                        (found[number] / "manifest.json").read_bytes()
                    )
                except (OSError, orjson.JSONDecodeError):
                    continue
                if manifest.get("complete"):
                    generations[number] = Generation(
                        f"g{number}", number, found[number], manifest
                    )
            self._generations = generations
            self._extra = {
                n: g
                for n, g in self._extra.items()
                if n in found and n not in generations
            }

    def latest(self) -> Generation | None:
        self.refresh()
        if not self._generations:
            return None
        return self._generations[max(self._generations)]

    def by_number(self, number: int) -> Generation | None:
        """A retained generation, or an older one still on disk: a partition's base
        stays on disk until the rebase past it (retention protects it), and live
        reads need it mapped even when it is no longer among the newest K."""
        self.refresh()
        generation = self._generations.get(number)
        if generation is None:
            generation = self._older(number)
        return generation

    def _older(self, number: int) -> Generation | None:
        with self._lock:
            known = self._extra.get(number)
            if known is not None:
                return known
            directory = self.segments_dir / f"g{number}"
            try:
                manifest = orjson.loads((directory / "manifest.json").read_bytes())
            except (OSError, orjson.JSONDecodeError):
                return None
            if not manifest.get("complete"):
                return None
            # Few bases are ever older than the newest K (one per rebase in flight).
            if len(self._extra) >= 4:
                self._extra.pop(min(self._extra))
            generation = Generation(f"g{number}", number, directory, manifest)
            self._extra[number] = generation
            return generation

    def get(self, generation_id: str | None) -> Generation:
        """The pinned generation (or the latest); raises when expired or unknown."""
        self.refresh()
        latest = self.latest()
        if generation_id is None:
            if latest is None:
                raise GenerationNotFoundError("no generation has been published yet")
            return latest
        number = generation_number(generation_id)
        if number is None:
            raise GenerationNotFoundError(f"malformed generation id {generation_id!r}")
        generation = self._generations.get(number)
        if generation is not None:
            return generation
        if latest is not None and number < latest.number:
            raise GenerationExpiredError(generation_id, latest.id)
        raise GenerationNotFoundError(f"generation {generation_id} does not exist")


def quarantine_thresholds(
    registry: GenerationRegistry,
) -> dict[str, dict[str, int]]:
    """board -> cohort -> points above which an event is held (latest generation's
    ``quarantine`` map; empty before the first generation).

    Writes must not rescan the segments directory (reads do, rate-limited): this takes
    the newest generation the registry has already mapped."""
    known = registry._generations
    latest = known[max(known)] if known else None
    if latest is None:
        return {}
    raw = latest.manifest.get("quarantine") or {}
    return {
        str(board): {str(c): int(v) for c, v in cohorts.items()}
        for board, cohorts in raw.items()
    }
