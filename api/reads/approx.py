"""Approximate reads: a player's rank from the bucket histogram (mode=approx).

The summed histogram of every partition's Fenwick tree (:mod:`api.approx`) is kept
per board while the board's stamp holds; otherwise the partitions' trees are asked
around the player's score in one round trip. Also the fallback of a player's live
rank that cannot be exact (:mod:`api.reads.policy`).
"""

from __future__ import annotations

import asyncio
import bisect
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from api.approx import Histogram, Stamp, TreeSizeError
from api.metrics import READ_CACHE
from api.reads.labels import Mode, top_percent
from conf.boards import board_label
from serving.registry import Generation, GenerationRegistry
from speed.live import LiveReader, NotExact, PlayerMissing
from speed.partitions import partition_of
from speed.rebase import bucket_lowers
from speed.scripts import APPROX_RANK

APPROX_HITS = READ_CACHE.labels("approx_histogram", "hit")
APPROX_MISSES = READ_CACHE.labels("approx_histogram", "miss")
# When a board's histogram, once read, served no read before the stamp moved again
# (writes outpace reads), this many approximate reads ask the partitions' trees
# around their score before the tables are read again (see _histogram).
HISTOGRAM_BACKOFF = 16
# Reply slots of approx_rank.lua, looked up once (a per-reply lookup showed in
# the approximate read's profile).
_HIGHER, _SAME, _ALL, _BASE, _POSITION = (
    APPROX_RANK.fields.index(name)
    for name in ("higher", "same_bucket", "all", "base_generation", "position")
)


@dataclass(frozen=True, slots=True)
class ApproxCounts:
    """What an approximate rank is made of, from the kept histogram or from every
    partition's tree: players in higher buckets, in the score's bucket, in all,
    and the log positions the counts are exact for."""

    higher: int
    same: int
    population: int
    as_of: dict[str, int]


class ApproxReads:
    """Approximate ranks of one app, with the histograms and scores they keep."""

    def __init__(self, live: LiveReader, registry: GenerationRegistry) -> None:
        self.live = live
        self.registry = registry
        # Last live score seen per (board, player): the approximate read guesses
        # with it, so it needs one round trip (:meth:`rank`).
        self._scores: OrderedDict[tuple[str, str], int] = OrderedDict()
        # Per board: the summed histogram (api/approx.py), its read in flight, the
        # reads it served, and the reads answered without it since it went stale.
        self._histograms: dict[str, Histogram] = {}
        self._histogram_flights: dict[str, asyncio.Future[Histogram | None]] = {}
        self._histogram_served: dict[str, int] = {}
        self._histogram_skipped: dict[str, int] = {}

    async def rank(
        self, board: str, player_id: str, mode: Mode, own: bool
    ) -> dict[str, Any]:
        """Rank from the bucket histogram. One round trip reads the board's stamp
        (:meth:`speed.live.LiveReader.stamp`) and the player's total and flag;
        while the stamp equals the histogram's kept in the API (:mod:`api.approx`)
        that is all. Otherwise the histogram is read again (one more round trip,
        shared by concurrent reads), or, when that cannot help (a rebase under way,
        or the stamp moving faster than tables are worth reading), every
        partition's tree is asked around the score (:meth:`_approx_by_partition`).
        """
        owner_p = partition_of(player_id, self.live.partitions)
        stamp, (raw, flag) = await self.live.stamp(
            self.live.standing_fields(board, player_id)
        )
        total = None if raw is None else int(bytes(raw).split(b"|", 1)[0])
        if raw is None:
            # No total in Redis: unchanged since the owner partition's base (the
            # stamp's bases come first, in partition order).
            standing = self.live.base_standing(board, player_id, stamp[owner_p])
            total = None if standing is None else standing[0]
        shadowed = flag in (b"shadow", "shadow")
        if total is None or (shadowed and not own):
            raise PlayerMissing(player_id)
        histogram = await self._histogram(board, stamp)
        if histogram is None:
            APPROX_MISSES.inc()
            total, shadowed, counts = await self._approx_by_partition(
                board, player_id, own
            )
        else:
            APPROX_HITS.inc()
            higher, same = histogram.around(total)
            positions = stamp[self.live.partitions : 2 * self.live.partitions]
            counts = ApproxCounts(
                higher,
                same,
                histogram.population,
                {str(p): position for p, position in enumerate(positions)},
            )
        return self._approx_body(board, mode, player_id, total, shadowed, counts)

    def _approx_body(
        self,
        board: str,
        mode: Mode,
        player_id: str,
        total: int,
        shadowed: bool,
        counts: ApproxCounts,
    ) -> dict[str, Any]:
        # The true rank lies in [higher + 1, higher + same]; same >= 1 (the player)
        # unless it is shadowed: then the histogram lacks it and its own read counts
        # it back in, anywhere in its bucket.
        higher, population = counts.higher, counts.population
        error = max(0, counts.same - 1)
        if shadowed:
            population += 1
            error = counts.same
        latest = self.registry.latest()
        return {
            **board_label(board),
            "mode": mode,
            "exactness": "approximate",
            "basis": "histogram",
            "errorBound": error,
            "generation": latest.header if latest else None,
            "asOf": counts.as_of,
            "population": population,
            "playerId": player_id,
            "score": total,
            "rank": higher + 1,
            "topPercent": top_percent(higher + 1, population),
        }

    async def _histogram(self, board: str, stamp: Stamp) -> Histogram | None:
        """The board's histogram exact for ``stamp``, read again if the kept one is
        not; None when no histogram can be (see :meth:`rank`)."""
        kept = self._histograms.get(board)
        if kept is not None and kept.stamp == stamp:
            self._histogram_served[board] = self._histogram_served.get(board, 0) + 1
            return kept
        latest = self.registry.latest()
        number = latest.number if latest is not None else 0
        if any(b != number for b in stamp[: self.live.partitions]):
            return None  # a rebase under way: the partitions' buckets differ
        flight = self._histogram_flights.get(board)
        if flight is None:
            if kept is not None and not self._histogram_served.get(board):
                # The last tables served nothing before the stamp moved: under a
                # stream of writes, read them again only every so often.
                skipped = self._histogram_skipped.get(board, 0) + 1
                self._histogram_skipped[board] = skipped
                if skipped < HISTOGRAM_BACKOFF:
                    return None
            self._histogram_skipped[board] = 0
            self._histogram_served[board] = 0
            flight = asyncio.ensure_future(self._read_histogram(board, latest))
            self._histogram_flights[board] = flight
            flight.add_done_callback(lambda _: self._histogram_flights.pop(board, None))
        histogram = await asyncio.shield(flight)
        # Only reads served from the kept histogram count as served (above): the
        # read that had it read would have paid a round trip either way.
        return histogram if histogram is not None and histogram.stamp == stamp else None

    async def _read_histogram(
        self, board: str, latest: Generation | None
    ) -> Histogram | None:
        """Every partition's tree, with the stamp it is exact for (flags version and
        epoch read before the trees, as :meth:`speed.live.LiveReader.stamp` orders
        them). Without a generation the trees have one bucket (no boundaries)."""
        number = latest.number if latest is not None else 0
        lowers = self._lowers(board, latest) if latest is not None else []
        if lowers is None:
            return None
        replies = await self.live.histogram_tables(board)
        tables = replies[2:]
        bases = [_int(t[0]) for t in tables]
        if any(b != number for b in bases):
            return None
        stamp = (
            *bases,
            *(_int(t[1]) for t in tables),
            int(replies[0] or 0),
            int(replies[1] or 0),
        )
        try:
            histogram = Histogram.of(
                stamp, number, lowers, [bytes(t[2]) for t in tables]
            )
        except TreeSizeError:
            return None
        self._histograms[board] = histogram
        if len(self._histograms) > 256:
            self._histograms.pop(next(iter(self._histograms)))
        return histogram

    async def _approx_by_partition(
        self, board: str, player_id: str, own: bool
    ) -> tuple[int, bool, ApproxCounts]:
        """(live total, shadowed?, counts) from every partition's Fenwick tree,
        asked around the score in one round trip: the player's total and flag are
        read in the same write as the counts, which are asked for the score the
        player had when last seen (or in the base generation). Only when that
        guess is wrong (the player scored since) does a second round trip ask for
        the right score."""
        guess = self._guess_score(board, player_id)
        total, shadowed, counts = await self._approx_round(board, player_id, guess)
        if total is None:
            raise PlayerMissing(player_id)
        if shadowed and not own:
            raise PlayerMissing(player_id)
        if total != guess:
            _, _, counts = await self._approx_round(board, player_id, total)
        self._remember(board, player_id, total)
        return (
            total,
            shadowed,
            ApproxCounts(
                sum(_int(c[_HIGHER]) for c in counts),
                sum(_int(c[_SAME]) for c in counts),
                sum(_int(c[_ALL]) for c in counts),
                {str(p): _int(c[_POSITION]) for p, c in enumerate(counts)},
            ),
        )

    def _guess_score(self, board: str, player_id: str) -> int:
        known = self._scores.get((board, player_id))
        if known is not None:
            return known
        latest = self.registry.latest()
        segment = latest.board(board) if latest is not None else None
        if segment is not None:
            row = segment.row_of(player_id)
            if row is not None:
                return int(segment.scores[row])
            if player_id in segment.hidden:
                return segment.hidden[player_id]
        return 0

    def _remember(self, board: str, player_id: str, score: int) -> None:
        key = (board, player_id)
        self._scores[key] = score
        self._scores.move_to_end(key)
        if len(self._scores) > 100_000:
            self._scores.popitem(last=False)

    def _lowers(self, board: str, latest: Generation) -> list[int] | None:
        """The bucket lower bounds a rebase onto ``latest`` put in Redis (cached per
        generation); None without a mapped segment."""
        key = f"bucket_lowers:{board}"
        lowers = latest.memo.get(key)
        if lowers is None:
            segment = latest.board(board)
            if segment is None:
                return None
            lowers = latest.memo.setdefault(key, bucket_lowers(segment).tolist())
        return lowers  # type: ignore[no-any-return]

    def _bucket_of(self, board: str, score: int) -> tuple[int, int, int] | None:
        """(bucket index, bucket count, generation number) of ``score`` in the
        latest generation's histogram boundaries (the ones a rebase onto it put in
        Redis), so the histogram script does no lookup of its own; None without a
        mapped segment."""
        latest = self.registry.latest()
        if latest is None:
            return None
        lowers = self._lowers(board, latest)
        if lowers is None:
            return None
        return (
            max(1, bisect.bisect_right(lowers, score)),
            max(1, len(lowers)),
            (latest.number),
        )

    async def _approx_round(
        self, board: str, player_id: str, score: int
    ) -> tuple[int | None, bool, list[list[Any]]]:
        """(live total, shadowed?, histogram counts per partition) in one round
        trip (hiredis-packed, as the exact reads). The bucket comes from the latest
        generation; if a partition's base is another one (a rebase under way), the
        counts are read again with the script's own lookup."""
        bucket = self._bucket_of(board, score)
        for given in (bucket, None) if bucket is not None else (None,):
            args = APPROX_RANK.args_of(
                {
                    "score": score,
                    "bucket": given[0] if given else "",
                    "size": given[1] if given else "",
                }
            )
            replies = await self.live.approx_counts(board, player_id, args)
            counts = replies[2:]
            if given is not None and any(_int(c[_BASE]) != given[2] for c in counts):
                continue
            raw, flag = replies[0], replies[1]
            total = None if raw is None else int(bytes(raw).split(b"|", 1)[0])
            if raw is None:
                # No total in Redis: unchanged since the owner partition's base.
                owner_p = partition_of(player_id, self.live.partitions)
                number = _int(counts[owner_p][_BASE])
                standing = self.live.base_standing(board, player_id, number)
                total = None if standing is None else standing[0]
            return total, flag in (b"shadow", "shadow"), counts
        raise NotExact("the histogram changed generation while it was read")


def _int(value: Any) -> int:
    return int(value.decode() if isinstance(value, bytes) else value)
