"""The published generations a process can see: a registry that notices new ones
(re-scanning the segments directory at most every ``REFRESH_SECONDS``) and keeps the
newest ``retained`` mapped; each generation maps its board segments lazily.

A process that serves reads gives the registry a *warmer*: when a newer
generation appears, a thread of its own prepares it (maps the boards the one before
it had mapped, derives what readers derive per board, e.g. speed/baserows.py's
partition rows), while reads go on. It is the latest at once, as without a warmer;
what the warmer buys is that the live reads after the partitions' rebase onto it,
which comes seconds after its manifest (`lb publish`), find those ready instead of
deriving them on the event loop: 21-23 s per worker for a board of 100 M players
(bench/RESULTS.md, "Reads at the seeds' scale"). A read that needs one while the
warmer derives it waits for that one (:meth:`Generation.derive`)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from serving import contributions as contributions_index
from serving.contributions import ContributionsIndex
from serving.landed import LandedIndex, chain_of
from serving.layers import load_board
from serving.manifest import (
    MANIFEST_FILE,
    generation_id,
    generation_number,
    read_manifest,
)
from serving.segments import BoardSegment

REFRESH_SECONDS = 0.5

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Generation:
    """A published generation: its manifest and lazily mapped board segments."""

    id: str
    number: int
    directory: Path
    manifest: dict[str, Any]
    _boards: dict[str, BoardSegment] = field(default_factory=dict)
    # Whatever readers derive from this immutable generation and keep with it (e.g.
    # encoded answers, api/reads.py); it goes when the generation is unmapped.
    memo: dict[str, Any] = field(default_factory=dict, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # One lock per derive() key: a read that needs what a warmer is deriving
    # waits for it instead of deriving it a second time.
    _derive_locks: dict[str, threading.Lock] = field(default_factory=dict)

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
                self._boards[board] = load_board(self.directory, board, meta)
            return self._boards[board]

    def mapped_boards(self) -> list[str]:
        """The boards whose segments are mapped so far (the ones being read); read
        under the lock that maps them (a warmer calls it from its own thread)."""
        with self._lock:
            return sorted(self._boards)

    def derive(self, key: str, build: Callable[[], T]) -> T:
        """``memo[key]``, built once by ``build`` (the generation is immutable, so
        whatever is derived from it holds as long as it does)."""
        if key in self.memo:
            return self.memo[key]  # type: ignore[no-any-return]
        with self._lock:
            lock = self._derive_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.memo:
                self.memo[key] = build()
            return self.memo[key]  # type: ignore[no-any-return]

    def landed(self) -> LandedIndex | None:
        """The generation's landed records index (serving/landed.py), mapped once;
        None when it has none."""
        if "landed-index" not in self.memo:
            layers = chain_of(self.manifest)
            with self._lock:
                if "landed-index" not in self.memo:
                    self.memo["landed-index"] = (
                        None if layers is None else LandedIndex(self.directory, layers)
                    )
        found: LandedIndex | None = self.memo["landed-index"]
        return found

    def contributions(self, block: bool = True) -> ContributionsIndex | None:
        """The generation's contributions index (serving/contributions.py), mapped
        once; None when it has none. ``block=False``: :class:`NotMapped` instead of
        mapping it (it opens files)."""
        if "contributions-index" not in self.memo:
            if not block:
                raise NotMapped(self.id)
            with self._lock:
                if "contributions-index" not in self.memo:
                    self.memo["contributions-index"] = contributions_index.load(
                        self.directory, self.manifest
                    )
        found: ContributionsIndex | None = self.memo["contributions-index"]
        return found


class NotMapped(Exception):
    """A read asked not to block needs a file of the generation mapped first."""


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

    def __init__(
        self,
        segments_dir: Path,
        retained: int,
        warmer: Callable[[Generation, Generation], None] | None = None,
    ) -> None:
        self.segments_dir = Path(segments_dir)
        self.retained = retained
        # (new generation, the latest before it): prepares the new one in a
        # thread (module docstring).
        self.warmer = warmer
        # Numbers of the generations a warmer is preparing.
        self._warming: set[int] = set()
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
                    os.path.join(entry.path, MANIFEST_FILE)
                ):
                    found[number] = Path(entry.path)
            keep = sorted(found)[-self.retained :]
            generations: dict[int, Generation] = {}
            fresh: list[Generation] = []
            for number in keep:
                known = self._generations.get(number)
                if known is not None:
                    generations[number] = known
                    continue
                manifest = read_manifest(found[number])
                if manifest is not None:
                    generations[number] = Generation(
                        generation_id(number), number, found[number], manifest
                    )
                    fresh.append(generations[number])
            previous = (
                self._generations[max(self._generations)] if self._generations else None
            )
            self._generations = generations
            if self.warmer is not None and previous is not None:
                for generation in fresh:
                    if generation.number > previous.number:
                        self._start_warming(generation, previous)
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

    def _start_warming(self, generation: Generation, previous: Generation) -> None:
        warmer = self.warmer
        assert warmer is not None
        self._warming.add(generation.number)

        def warm() -> None:
            try:
                warmer(generation, previous)
            except Exception:  # noqa: BLE001 - a failed warm-up only costs latency
                log.exception("warming %s failed; its reads map it", generation.id)
            finally:
                self._warming.discard(generation.number)

        threading.Thread(target=warm, name=f"warm-{generation.id}", daemon=True).start()

    def wait_warm(self, timeout: float) -> bool:
        """Until no generation is warming, at most ``timeout`` seconds (True when
        none is): for tests and tools, not for the event loop."""
        deadline = time.monotonic() + timeout
        while self._warming and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._warming

    def warming(self) -> list[str]:
        """Ids of the generations a warmer is still preparing."""
        return [
            self._generations[n].id
            for n in sorted(self._warming)
            if n in self._generations
        ]

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
            directory = self.segments_dir / generation_id(number)
            manifest = read_manifest(directory)
            if manifest is None:
                return None
            # Few bases are ever older than the newest K (one per rebase in flight).
            if len(self._extra) >= 4:
                self._extra.pop(min(self._extra))
            generation = Generation(generation_id(number), number, directory, manifest)
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
