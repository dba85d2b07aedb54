"""Why a rank changed (API.md, "Why a rank changed"): a player's history over the
retained generations and the board's award snapshots, and the diff of two
generations. The computations are :mod:`serving.history`; this module picks the
snapshots, adds the player's contributions and shapes the answers.

Contributions between two snapshots come from the contributions index the publish
job writes with every generation (serving/contributions.py owns the format): the
player's entries on the board in its partition with a log position in ``(previous
boundary, boundary]``, each with its ``delta`` computed when it was written. The
newest retained generation's index holds every position up to its boundary, which
is at or past every snapshot's (an award snapshot is taken from a generation), so
one index answers a read. A look-up is a few binary searches per layer of the
index's chain plus the found rows' fields (57-80 us of CPU on a loaded machine,
where the bronze scan it replaced cost 11-15 ms); it is cached per (board, player,
newest boundary). The index is mapped once per generation (opening its files: in
the thread pool, below); a look-up in a mapped one runs on the event loop.

No fallback to bronze: while the newest retained generation was published before
the index existed, history entries list no contributions; the next publish writes
the whole index (jobs/record_indexes.py, from bronze, once).

Per read, everything derived from the snapshots is kept: per board a :class:`View`
(the snapshots oldest first, their part of the answer cache's key, the labels),
rebuilt when a generation, the config or the season's award versions change; the
boards' arrays and the pairs' overlap indexes in :class:`serving.history.PairIndexes`.
A read asked not to block (``block=False``: the route calls it on the event loop)
raises :class:`WouldBlock` when it would read files (map a generation's
contributions index among them) or build an index; the route then runs it in the
thread pool.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api.errors import InvalidRequest, PlayerNotFound
from api.reads import Answer, check_board, encode, pin, top_percent
from conf.boards import BoardsConfig, board_label
from serving.awards import read_version, versions, versions_root
from serving.history import (
    DIFF_ROWS,
    AwardStandings,
    NotKept,
    PairIndexes,
    SegmentStandings,
    Snapshot,
    player_steps,
)
from serving.manifest import generation_id, generation_number
from serving.registry import (
    Generation,
    GenerationExpiredError,
    GenerationNotFoundError,
    GenerationRegistry,
    NotMapped,
)
from serving.segments import BoardSegment
from speed.partitions import partition_of

# Encoded history answers kept (LRU), each valid while its snapshots are.
ANSWERS_KEPT = 4096
# A directory changed this recently is listed again on every read: its mtime
# ticks with the kernel's coarse clock, so a later change may not move it.
SETTLED_NS = 1_000_000_000


class WouldBlock(Exception):
    """A read asked not to block (``block=False``: on the event loop) needs file
    reads or an O(n) build first: the caller runs it in a thread."""


@dataclass(frozen=True, slots=True)
class Contribution:
    position: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class View:
    """What every history read of one board over one set of snapshots shares
    (built once per set, :meth:`HistoryService.view`): the snapshots oldest first
    with the public standings, their part of the answer cache's key, the board's
    labels; ``sources``: the generations and the config it was built from (held,
    compared by identity)."""

    sources: tuple[object, ...]
    awards: tuple[int, ...]
    snapshots: tuple[Snapshot, ...]
    key: tuple[tuple[str, tuple[int, int]], ...]
    labels: dict[str, Any]
    described: dict[str, str]


def labels(board: str) -> dict[str, Any]:
    return {**board_label(board), "exactness": "exact", "basis": "snapshot"}


class HistoryService:
    """History and diff reads of one app."""

    def __init__(
        self,
        config: Callable[[], BoardsConfig],
        registry: GenerationRegistry,
        data_dir: Path,
        partitions: int,
    ) -> None:
        self.config = config
        self.registry = registry
        self.data_dir = Path(data_dir)
        self.partitions = partitions
        self._awards: OrderedDict[tuple[str, int, str], AwardStandings | None] = (
            OrderedDict()
        )
        self._contributions: OrderedDict[tuple[Any, ...], list[Contribution]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        # Built once and kept: each board's rows and ranks, the overlap of each pair
        # of snapshots a history step compares, each pair's diff.
        self._pairs = PairIndexes()
        self._answers: OrderedDict[tuple[Any, ...], Answer] = OrderedDict()
        self._award_points: dict[tuple[str, int], Any] = {}
        self._views: OrderedDict[str, View] = OrderedDict()
        self._versions: dict[str, tuple[int, list[int]]] = {}

    # -------------------------------------------------------------- snapshots

    def retained(self) -> list[Generation]:
        """The retained generations, oldest first (the newest K the registry maps)."""
        latest = self.registry.latest()
        if latest is None:
            return []
        found = []
        for number in range(
            max(1, latest.number - self.registry.retained + 1), latest.number + 1
        ):
            try:
                found.append(self.registry.get(generation_id(number)))
            except (GenerationExpiredError, GenerationNotFoundError):
                continue  # gone since, or never published
        return found

    def _award_standings(
        self, season: str, version: int, board: str
    ) -> AwardStandings | None:
        key = (season, version, board)
        with self._lock:
            if key in self._awards:
                self._awards.move_to_end(key)
                return self._awards[key]
        found = read_version(self.data_dir, season, version)
        table = found.board(board) if found is not None else None
        standings = AwardStandings(table) if table is not None else None
        with self._lock:
            self._awards[key] = standings
            while len(self._awards) > 64:
                self._awards.popitem(last=False)
        return standings

    def _generation_point(
        self, gen: Generation, board: str
    ) -> tuple[dict[str, Any], dict[str, int], BoardSegment | None]:
        """The generation's header, boundary and board segment, kept with it."""
        key = f"history\0{board}"
        found = gen.memo.get(key)
        if found is None:
            found = gen.memo[key] = (
                {"id": gen.id, "publishedAt": gen.header["publishedAt"]},
                gen.boundary,
                gen.board(board),
            )
        return found  # type: ignore[no-any-return]

    def _award_point(
        self, season: str, number: int
    ) -> tuple[dict[str, Any], dict[str, int], tuple[int, int]] | None:
        """An award version's header, boundary and order (a version never
        changes once complete, so it is read once)."""
        key = (season, number)
        with self._lock:
            if key in self._award_points:
                return self._award_points[key]
        award = read_version(self.data_dir, season, number)
        if award is None:
            return None  # not complete (yet): asked again next time
        meta = award.meta
        point = (
            {
                "id": award.generation,
                "publishedAt": meta.get("closedAt"),
                "award": {"season": season, "version": number},
            },
            {str(k): int(v) for k, v in meta["boundary"].items()},
            (generation_number(award.generation) or 0, number),
        )
        with self._lock:
            self._award_points[key] = point
            while len(self._award_points) > 256:
                self._award_points.pop(next(iter(self._award_points)))
        return point

    def snapshots(
        self,
        board: str,
        described: dict[str, str],
        own: str | None = None,
        gens: tuple[Generation, ...] | None = None,
        awards: tuple[int, ...] | None = None,
    ) -> list[Snapshot]:
        """``gens``, ``awards``: the retained generations and the season's award
        versions (default: as found now)."""
        out: list[Snapshot] = []
        for gen in self.retained() if gens is None else gens:
            header, boundary, segment = self._generation_point(gen, board)
            out.append(
                Snapshot(
                    header=header,
                    boundary=boundary,
                    order=(gen.number, 0),
                    standings=(
                        SegmentStandings(segment, own, self._pairs.board(segment))
                        if segment
                        else None
                    ),
                )
            )
        if described.get("window") == "season":
            season = described["period"]
            for number in self.award_versions(season) if awards is None else awards:
                point = self._award_point(season, number)
                if point is None:
                    continue
                header, boundary, order = point
                out.append(
                    Snapshot(
                        header=header,
                        boundary=boundary,
                        order=order,
                        standings=self._award_standings(season, number, board),
                    )
                )
        return out

    def award_versions(self, season: str) -> list[int]:
        """The season's complete award versions, listed again only when its
        directory changed (a version is renamed into place: the directory's
        mtime moves) or changed too recently to tell."""
        root = versions_root(self.data_dir, season)
        # os.access answers "absent" without raising (a season with no awards:
        # every history read of its boards asks).
        if not os.access(root, os.F_OK):
            return []
        try:
            mtime = os.stat(root).st_mtime_ns
        except FileNotFoundError:
            return []
        with self._lock:
            known = self._versions.get(season)
        if known is not None and known[0] == mtime:
            return known[1]
        found = versions(self.data_dir, season)
        if time.time_ns() - mtime > SETTLED_NS:
            with self._lock:
                self._versions[season] = (mtime, found)
                while len(self._versions) > 64:
                    self._versions.pop(next(iter(self._versions)))
        return found

    def view(self, board: str, block: bool = True) -> View:
        """The board's :class:`View` over the snapshots retained now, built when
        they change (``block=False``: :class:`WouldBlock` instead of building)."""
        config = self.config()
        gens = tuple(self.retained())
        with self._lock:
            view = self._views.get(board)
        if view is not None and view.sources[0] is config:
            described = view.described
        else:
            described = check_board(config, board)
        season = described["period"] if described.get("window") == "season" else None
        awards = tuple(self.award_versions(season)) if season is not None else ()
        sources = (config, *gens)
        if (
            view is not None
            and view.awards == awards
            and len(view.sources) == len(sources)
            and all(a is b for a, b in zip(view.sources, sources, strict=True))
        ):
            return view
        if not block:
            raise WouldBlock
        snapshots = [
            # The board's arrays are not held by the view: PairIndexes keeps a
            # bounded number of them, fetched per read (:meth:`_standings`).
            Snapshot(
                s.header, s.boundary, s.order, SegmentStandings(s.standings.segment)
            )
            if isinstance(s.standings, SegmentStandings)
            else s
            for s in sorted(
                self.snapshots(board, described, None, gens, awards),
                key=lambda s: s.order,
            )
        ]
        view = View(
            sources,
            awards,
            tuple(snapshots),
            tuple((s.header["id"], s.order) for s in snapshots),
            labels(board),
            described,
        )
        if len(snapshots) == len(gens) + len(awards):  # every award version read
            with self._lock:
                self._views[board] = view
                self._views.move_to_end(board)
                while len(self._views) > 256:
                    self._views.popitem(last=False)
        return view

    # ---------------------------------------------------------- contributions

    def _player_events(
        self,
        view: View,
        board: str,
        player_id: str,
        partition: int,
        through: int,
        block: bool = True,
    ) -> list[Contribution] | None:
        """The player's entries on the board up to ``through``, in log order, with
        their delta, from the newest retained generation's contributions index;
        None when it has none. ``block=False``: :class:`WouldBlock` instead of
        mapping the index."""
        key = (board, player_id, partition, through)
        with self._lock:
            cached = self._contributions.get(key)
            if cached is not None:
                self._contributions.move_to_end(key)
                return cached
        newest = view.sources[-1]
        if not isinstance(newest, Generation):
            return None  # no retained generation: award snapshots only
        try:
            index = newest.contributions(block)
        except NotMapped:
            raise WouldBlock from None
        if index is None:
            return None
        out = [
            Contribution(position, body)
            for position, body in index.contributions(
                board, player_id, partition, through
            )
        ]
        with self._lock:
            self._contributions[key] = out
            while len(self._contributions) > 256:
                self._contributions.popitem(last=False)
        return out

    # ------------------------------------------------------------------ reads

    def history(
        self,
        board: str,
        player_id: str,
        limit: int,
        own: bool = False,
        block: bool = True,
    ) -> Answer:
        """``own``: the player's own read (its token): a generation it is shadowed
        in lists it as if present, as its own rank read does (api/reads/).
        ``block=False`` (on the event loop): :class:`WouldBlock` when the read
        needs file reads or a build first."""
        if not 1 <= limit <= 100:
            raise InvalidRequest("limit must be 1..100", field="limit")
        view = self.view(board, block)
        # Snapshots never change: the answer holds until one comes or goes.
        key = (board, player_id, own, limit, view.key)
        with self._lock:
            cached = self._answers.get(key)
            if cached is not None:
                self._answers.move_to_end(key)
                return cached
        try:
            snapshots = self._standings(view, player_id if own else None, block)
            answer = self._history(board, player_id, limit, snapshots, view, block)
        except NotKept:
            raise WouldBlock from None
        with self._lock:
            self._answers[key] = answer
            while len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)
        return answer

    def _standings(
        self, view: View, own: str | None, block: bool
    ) -> tuple[Snapshot, ...]:
        """The view's snapshots with each generation's standings as ``own`` reads
        them, with the board's kept arrays (:class:`NotKept` when not built and
        ``block`` is False)."""
        out = []
        for snapshot in view.snapshots:
            standings = snapshot.standings
            if isinstance(standings, SegmentStandings):
                segment = standings.segment
                snapshot = Snapshot(
                    snapshot.header,
                    snapshot.boundary,
                    snapshot.order,
                    SegmentStandings(segment, own, self._pairs.board(segment, block)),
                )
            out.append(snapshot)
        return tuple(out)

    def _history(
        self,
        board: str,
        player_id: str,
        limit: int,
        ordered: tuple[Snapshot, ...],
        view: View,
        block: bool,
    ) -> Answer:
        """``ordered``: the snapshots, oldest first."""
        steps = player_steps(
            ordered, player_id, limit, self._pairs, block, ordered=True
        )
        if not steps:
            raise PlayerNotFound(
                f"player {player_id!r} is on no retained generation or award "
                f"snapshot of {board}"
            )
        partition = str(partition_of(player_id, self.partitions))
        newest = steps[0].snapshot.boundary.get(partition, 0)
        events = self._player_events(
            view, board, player_id, int(partition), newest, block
        )
        entries = []
        for step in steps:
            lower_snapshot = step.previous
            if lower_snapshot is None:
                index = ordered.index(step.snapshot)
                lower_snapshot = ordered[index - 1] if index > 0 else None
            lower = lower_snapshot.boundary.get(partition, 0) if lower_snapshot else 0
            upper = step.snapshot.boundary.get(partition, 0)
            changes = [c.body for c in events or [] if lower < c.position <= upper]
            entries.append(
                {
                    "generation": step.snapshot.header,
                    "score": step.score,
                    "rank": step.rank,
                    "topPercent": top_percent(step.rank, step.population),
                    "population": step.population,
                    "changes": changes,
                    "rankChange": step.rank_change,
                }
            )
        return encode({**view.labels, "playerId": player_id, "entries": entries})

    def diff(self, board: str, from_id: str, to_id: str, limit: int) -> Answer:
        if not 1 <= limit <= DIFF_ROWS:
            raise InvalidRequest(f"limit must be 1..{DIFF_ROWS}", field="limit")
        check_board(self.config(), board)
        before, after = pin(self.registry, from_id), pin(self.registry, to_id)
        # The pair's diff is built once (serving/history.py PairDiff); a read
        # slices its first rows and encodes them.
        was, now = before.board(board), after.board(board)
        body = {
            **labels(board),
            "from": {"id": before.id, "publishedAt": before.header["publishedAt"]},
            "to": {"id": after.id, "publishedAt": after.header["publishedAt"]},
            **self._pairs.diff(was, now).page(limit),
        }
        return encode(body)
