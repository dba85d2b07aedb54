"""The read service: top / rank / nearby / entries / friends for a mode.

One place decides how a read is answered, so the routes only validate input:

* **snapshot** (``mode=snapshot``, a pinned ``generation``, or a closed board whose
  final state is in the latest generation): the mapped segment; the answer is fixed
  for the generation, so its encoded bytes are cached per generation;
* **live**: the base generation merged with the speed layer (:mod:`speed.live`); live
  top lists are cached per board (:class:`LiveTopCache`);
* **approx**: the Fenwick histogram, one Redis round trip (:meth:`approx_rank`);
* **fallbacks**: exactness impossible live (a rebase in progress) -> the latest
  generation, labelled snapshot; Redis unreachable -> the latest generation with
  ``liveLayer: unavailable`` (:mod:`api.degraded`).

Shadow removal (issue 10): a shadowed player is hidden from every public answer, but
a read about the player by the player (a valid player token for it) answers as if the
player were present, in every mode; without a token (or with an invalid one) or with
another player's token it is hidden, as for any other reader (issue 23).

Answers are dicts in the contract's key order, encoded once with orjson
(:class:`Answer`); :mod:`api.models` documents their shapes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from api.approx import Histogram, Stamp, TreeSizeError
from api.degraded import (
    LIVE_LAYER_HEADER,
    REDIS_DOWN,
    degraded_snapshot,
)
from api.errors import (
    AwardsNotFound,
    BoardNotFound,
    GenerationExpired,
    GenerationNotFound,
    InvalidRequest,
    LiveUnavailable,
    NotReady,
    PlayerNotFound,
)
from api.metrics import READ_CACHE
from conf.boards import BoardsConfig, board_order, describe_board
from conf.rule_state import describe_replay_board
from serving.awards import AwardVersion, read_version
from serving.orientation import real_body
from serving.ranking import Ranking, native_ranking, rank_of, rerank
from serving.registry import (
    Generation,
    GenerationExpiredError,
    GenerationNotFoundError,
    GenerationRegistry,
)
from serving.segments import BoardSegment
from speed.closed import final_boards
from speed.flags import shadowed_among
from speed.friends import FriendsReader, rank_members, read_friends, snapshot_scores
from speed.live import (
    ATTEMPTS,
    Base,
    LiveReader,
    NotExact,
    PlayerMissing,
)
from speed.partitions import partition_of
from speed.profiles import ProfileCache, version_rider
from speed.rebase import bucket_lowers
from speed.scripts import APPROX_RANK

Mode = Literal["live", "snapshot", "approx"]
SNAPSHOT_HITS = READ_CACHE.labels("snapshot", "hit")
SNAPSHOT_MISSES = READ_CACHE.labels("snapshot", "miss")
LIVE_HITS = READ_CACHE.labels("live_top", "hit")
LIVE_MISSES = READ_CACHE.labels("live_top", "miss")
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


@dataclass(frozen=True, slots=True)
class Answer:
    """An encoded answer: the JSON bytes, any extra headers, and the players it
    names (its ``playerId`` and its entries'), whose profiles it may carry
    (:meth:`ReadService.profiled`)."""

    body: bytes
    headers: Mapping[str, str] | None = None
    players: tuple[str, ...] = ()


def players_of(body: dict[str, Any]) -> tuple[str, ...]:
    # Entries of a ranked answer name a player; a history's entries are generations.
    named = [e["playerId"] for e in body.get("entries", ()) if "playerId" in e]
    if "playerId" in body:
        named.append(body["playerId"])
    return tuple(dict.fromkeys(named))


def encode(body: dict[str, Any]) -> Answer:
    return Answer(orjson.dumps(body), None, players_of(body))


def degraded(body: dict[str, Any]) -> Answer:
    return Answer(
        orjson.dumps({**body, "liveLayer": "unavailable"}),
        {LIVE_LAYER_HEADER: "unavailable"},
        players_of(body),
    )


def with_profiles(answer: Answer, profiles: dict[str, dict[str, str]]) -> Answer:
    """The answer with ``displayName`` and ``country`` on its entries (and on the
    player of a player read) where set; unchanged without any."""
    if not profiles:
        return answer
    body = orjson.loads(answer.body)
    for entry in body.get("entries", ()):
        entry.update(profiles.get(entry["playerId"], ()))
    if "playerId" in body:
        body.update(profiles.get(body["playerId"], ()))
    return Answer(orjson.dumps(body), answer.headers, answer.players)


# ------------------------------------------------------------------------- caches


# What one cache entry costs besides its answer's bytes and its key's strings (the
# dict slot, the key tuple and the Answer object), in bytes: an estimate, so that a
# flood of small answers under distinct keys is bounded by the byte budget too.
ENTRY_OVERHEAD = 320


def key_bytes(key: Hashable) -> int:
    """Approximate bytes a cache key holds (its strings dominate)."""
    if isinstance(key, str | bytes):
        return len(key)
    if isinstance(key, tuple):
        return sum(key_bytes(part) for part in key)
    return 16


class SnapshotCache:
    """Encoded snapshot answers of one generation, keyed by request. A generation
    never changes, so an entry never goes stale; least recently used entries leave
    beyond ``budget`` bytes (answers, keys and per-entry overhead) or beyond
    ``max_entries`` keys."""

    def __init__(self, budget: int = 32 << 20, max_entries: int = 8192) -> None:
        self.budget = budget
        self.max_entries = max_entries
        self.size = 0
        self._entries: OrderedDict[Hashable, Answer] = OrderedDict()
        self._costs: dict[Hashable, int] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Answer | None:
        answer = self._entries.get(key)
        if answer is None:
            self.misses += 1
            SNAPSHOT_MISSES.inc()
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        SNAPSHOT_HITS.inc()
        return answer

    def put(self, key: Hashable, answer: Answer) -> Answer:
        cost = len(answer.body) + key_bytes(key) + ENTRY_OVERHEAD
        if cost > self.budget // 8:
            return answer  # one huge answer must not flush the rest
        if self._entries.pop(key, None) is not None:
            self.size -= self._costs.pop(key)
        self._entries[key] = answer
        self._costs[key] = cost
        self.size += cost
        while self._entries and (
            self.size > self.budget or len(self._entries) > self.max_entries
        ):
            dropped, _ = self._entries.popitem(last=False)
            self.size -= self._costs.pop(dropped)
        return answer


@dataclass(slots=True)
class _LiveEntry:
    stamp: Stamp
    checked_at: float
    answer: Answer


class LiveTopCache:
    """Live top lists per (board, limit), single flight, honest labels.

    A cached answer is the exact answer as of its ``asOf``. It is reused while the
    board's change stamp (every partition's base generation and log position, and the
    flags version) is unchanged, i.e. while it is still the current answer; with
    ``ttl_ms`` > 0 it is served without that check for up to ``ttl_ms`` after the
    last check (bounded staleness; the ``asOf`` label still says what it includes).
    Concurrent misses with the same stamp share one computation.
    """

    def __init__(self, ttl_ms: int, entries: int = 1024) -> None:
        self.ttl = ttl_ms / 1000.0
        self.max_entries = entries
        self._entries: OrderedDict[tuple[str, int], _LiveEntry] = OrderedDict()
        self._flights: dict[tuple[Any, ...], asyncio.Future[Answer]] = {}
        self.computed = 0
        self.hits = 0

    def fresh(self, key: tuple[str, int]) -> Answer | None:
        """The cached answer when the TTL allows serving it unchecked."""
        entry = self._entries.get(key)
        if entry is None or self.ttl <= 0:
            return None
        if time.monotonic() - entry.checked_at <= self.ttl:
            self.hits += 1
            LIVE_HITS.inc()
            return entry.answer
        return None

    def current(self, key: tuple[str, int], stamp: Stamp) -> Answer | None:
        entry = self._entries.get(key)
        if entry is None or entry.stamp != stamp:
            return None
        entry.checked_at = time.monotonic()
        self._entries.move_to_end(key)
        self.hits += 1
        LIVE_HITS.inc()
        return entry.answer

    async def compute(
        self,
        key: tuple[str, int],
        stamp: Stamp,
        run: Callable[[], Awaitable[tuple[Answer, Stamp | None]]],
    ) -> Answer:
        """One computation per (key, stamp); ``run`` returns the answer and the stamp
        it is exact for (None: not cacheable, e.g. a fallback answer). It runs as its
        own task, so a caller that goes away (client disconnect) does not cancel it
        for the others waiting on it."""
        flight_key = (*key, stamp)
        flight = self._flights.get(flight_key)
        if flight is None:
            flight = asyncio.ensure_future(self._run(key, run))
            self._flights[flight_key] = flight
            flight.add_done_callback(lambda _: self._flights.pop(flight_key, None))
        return await asyncio.shield(flight)

    async def _run(
        self,
        key: tuple[str, int],
        run: Callable[[], Awaitable[tuple[Answer, Stamp | None]]],
    ) -> Answer:
        self.computed += 1
        LIVE_MISSES.inc()
        answer, exact_for = await run()
        if exact_for is not None:
            self._entries[key] = _LiveEntry(exact_for, time.monotonic(), answer)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return answer

    def clear(self) -> None:
        self._entries.clear()


# ------------------------------------------------------------------------ helpers


def is_own_read(viewer: str | None, player_id: str) -> bool:
    """A read about ``player_id`` is the player's own only with a valid player
    token naming it (``viewer``, api.deps.get_viewer); an anonymous read is public
    and must not see a shadowed player (API.md: hidden from every public answer)."""
    return viewer is not None and viewer == player_id


def check_board(config: BoardsConfig, board: str) -> dict[str, str]:
    # A replay's namespace board (season:<S>@<R>:<scope>) reads like a board.
    described = describe_board(config, board) or describe_replay_board(config, board)
    if described is None:
        raise BoardNotFound(f"no board {board!r}")
    return described


def pin(registry: GenerationRegistry, generation_id: str | None) -> Generation:
    try:
        return registry.get(generation_id)
    except GenerationExpiredError as exc:
        raise GenerationExpired(
            f"generation {exc.generation_id} is no longer retained",
            latestGeneration=exc.latest,
        ) from None
    except GenerationNotFoundError as exc:
        raise GenerationNotFound(str(exc)) from None


def snapshot_header(
    board: str, mode: Mode, generation: Generation, population: int
) -> dict[str, Any]:
    """Labels of a snapshot answer: exactly generation ``g``, as of its boundary."""
    return {
        "board": board,
        "mode": mode,
        "exactness": "exact",
        "basis": "snapshot",
        "errorBound": 0,
        "generation": generation.header,
        "asOf": generation.header["boundary"],
        "population": population,
    }


def live_header(
    board: str, mode: Mode, base: Base, as_of: dict[str, int], population: int
) -> dict[str, Any]:
    """Labels of a live answer: base generation merged with every event up to asOf."""
    return {
        "board": board,
        "mode": mode,
        "exactness": "exact",
        "basis": "live",
        "errorBound": 0,
        "generation": base.generation.header if base.generation else None,
        "asOf": as_of,
        "population": population,
    }


def public(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Live entries without the internal keyset time of first_achieved boards."""
    return [{k: v for k, v in e.items() if k != "_t"} for e in entries]


def top_percent(rank: int, population: int) -> float:
    return round(100 * rank / max(1, population), 6)


# Cursors are keyset positions on the ordering tuple (score, playerId), pinned to the
# generation they came from; opaque to clients (base64url JSON).
def encode_cursor(
    generation: str,
    board: str,
    score: int,
    player_id: str,
    way: str,
    achieved: int | None = None,
) -> str:
    data: dict[str, Any] = {"g": generation, "b": board, "s": score, "p": player_id}
    data["d"] = way
    if achieved is not None:
        # first_achieved boards: the time is part of the ordering tuple.
        data["t"] = achieved
    return base64.urlsafe_b64encode(orjson.dumps(data)).decode().rstrip("=")


CURSOR_FIELDS = frozenset(("g", "b", "s", "p", "d", "t"))


def decode_cursor(cursor: str, board: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = orjson.loads(raw)
        if not (
            isinstance(data, dict)
            # Only the fields encode_cursor writes: a cursor padded with others
            # would be a distinct cache key for the same page (api/reads.py caches).
            and data.keys() <= CURSOR_FIELDS
            and isinstance(data.get("g"), str)
            and data.get("b") == board
            and isinstance(data.get("s"), int)
            and isinstance(data.get("p"), str)
            and data.get("d") in ("after", "before")
            and isinstance(data.get("t", 0), int)
        ):
            raise ValueError
        return data
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise InvalidRequest(
            "cursor is malformed or belongs to another board", field="cursor"
        ) from None


def segment_cursors(
    generation: Generation,
    board: str,
    segment: BoardSegment | None,
    start: int,
    stop: int,
) -> dict[str, str | None]:
    """Cursors to the page before ``start`` and after ``stop`` (null at either end)."""
    if segment is None:
        return {"before": None, "after": None}
    before = after = None

    def achieved(row: int) -> int | None:
        return None if segment.achieved is None else int(segment.achieved[row])

    if start > 0:
        before = encode_cursor(
            generation.id,
            board,
            int(segment.scores[start]),
            segment.players.str_at(start),
            "before",
            achieved(start),
        )
    if stop < segment.population:
        row = stop - 1
        after = encode_cursor(
            generation.id,
            board,
            int(segment.scores[row]),
            segment.players.str_at(row),
            "after",
            achieved(row),
        )
    return {"before": before, "after": after}


def live_cursors(
    base: Base, board: str, entries: list[dict[str, Any]], population: int
) -> dict[str, str | None]:
    """Cursors from a live window into the base generation's pages (or null)."""
    if base.generation is None or not entries:
        return {"before": None, "after": None}
    first, last = entries[0], entries[-1]
    return {
        "before": None
        if first["position"] <= 1
        else encode_cursor(
            base.generation.id,
            board,
            first["score"],
            first["playerId"],
            "before",
            first.get("_t"),
        ),
        "after": None
        if last["position"] >= population
        else encode_cursor(
            base.generation.id,
            board,
            last["score"],
            last["playerId"],
            "after",
            last.get("_t"),
        ),
    }


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a player stands in one generation: its display row (or, for a player
    shadowed in it, the row it would take), score, rank, and whether it is hidden."""

    row: int
    score: int
    rank: int
    hidden: bool


def standing_in(
    segment: BoardSegment | None, player_id: str, own: bool
) -> Standing | None:
    """The player's standing; a hidden (shadowed) player only on its own read."""
    if segment is None:
        return None
    row = segment.row_of(player_id)
    if row is not None:
        entry = segment.entry(row)
        return Standing(row, entry["score"], entry["rank"], False)
    if own and player_id in segment.hidden:
        score = segment.hidden[player_id]
        at = segment.first_row_at_or_after(score, player_id)
        rank = at + 1 if segment.unique_rank else segment.count_above(score) + 1
        return Standing(at, score, rank, True)
    return None


def window_entries(
    segment: BoardSegment, me: Standing, player_id: str, radius: int
) -> tuple[list[dict[str, Any]], int, int]:
    """Entries within ``radius`` of the player, and the segment rows [start, stop)
    they came from. A hidden player is put back in at its row: rows from there on
    move one position down, and one rank down when their score is below its."""
    if not me.hidden:
        start = max(0, me.row - radius)
        stop = min(segment.population, me.row + radius + 1)
        return segment.entries(start, stop), start, stop
    start = max(0, me.row - radius)
    stop = min(segment.population, me.row + radius)
    above = segment.entries(start, me.row)
    below = segment.entries(me.row, stop)
    for entry in below:
        entry["position"] += 1
        if segment.unique_rank or entry["score"] < me.score:
            entry["rank"] += 1
    mine = {
        "position": me.row + 1,
        "rank": me.rank,
        "playerId": player_id,
        "score": me.score,
    }
    return [*above, mine, *below], start, stop


# ------------------------------------------------------------------------ awards


def award_cursor(board: str, version: int, position: int, way: str) -> str:
    raw = orjson.dumps({"b": board, "v": version, "o": position, "d": way})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


AWARD_CURSOR_FIELDS = frozenset(("b", "v", "o", "d"))


def decode_award_cursor(cursor: str, board: str) -> dict[str, Any]:
    """A cursor is a position in one immutable award version of one board."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not (
            isinstance(data, dict)
            and data.keys() <= AWARD_CURSOR_FIELDS
            and data.get("b") == board
            and isinstance(data.get("v"), int)
            and isinstance(data.get("o"), int)
            and data.get("d") in ("after", "before")
        ):
            raise ValueError
        return data
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise InvalidRequest(
            "cursor is malformed or belongs to another board", field="cursor"
        ) from None


def award_page(
    version: AwardVersion, board: str, start: int, stop: int
) -> tuple[list[dict[str, Any]], int]:
    table = version.board(board)
    if table is None:
        return [], 0
    population = table.num_rows
    start, stop = max(0, start), min(population, stop)
    rows = table.slice(start, stop - start).to_pylist()
    entries = [
        {
            "position": r["position"],
            "rank": r["rank"],
            "playerId": r["player_id"],
            "score": r["score"],
            "tier": r["tier"],
        }
        for r in rows
    ]
    return entries, population


# ------------------------------------------------------------------------ service


class ReadService:
    """Answers the ranked reads of one app (see the module docstring)."""

    def __init__(
        self,
        config: BoardsConfig,
        registry: GenerationRegistry,
        live: LiveReader,
        friends: FriendsReader,
        data_dir: Path,
        live_cache_ms: int = 0,
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        self._award_pages = SnapshotCache(16 << 20)
        self.registry = registry
        self.live = live
        self.friends_reader = friends
        self.tops = LiveTopCache(live_cache_ms)
        self.profile_cache = ProfileCache()
        self._final: dict[str, frozenset[str]] = {}
        # Last live score seen per (board, player): the approximate read guesses
        # with it, so it needs one round trip (:meth:`approx_rank`).
        self._scores: OrderedDict[tuple[str, str], int] = OrderedDict()
        # Per board: the summed histogram (api/approx.py), its read in flight, the
        # reads it served, and the reads answered without it since it went stale.
        self._histograms: dict[str, Histogram] = {}
        self._histogram_flights: dict[str, asyncio.Future[Histogram | None]] = {}
        self._histogram_served: dict[str, int] = {}
        self._histogram_skipped: dict[str, int] = {}

    @property
    def speed(self) -> Any:
        return self.live.speed

    async def profiled(
        self, read: Answer | Awaitable[Answer], players: tuple[str, ...] = ()
    ) -> Answer:
        """The answer of ``read`` with its players' profiles. Only players the
        answer already names are looked up, so a hidden (shadowed) player's profile
        stays as hidden as the player. The profiles' version rides along with the
        read's own round trip; players seen at that version cost nothing more, the
        others one HMGET (speed/profiles.py); ``players`` known before the read
        (the player of a player read) ride along too. Redis unreachable: no
        profiles."""
        with version_rider(players) as rider:
            answer = read if isinstance(read, Answer) else await read
        # Score out: answers are built from oriented scores (serving/orientation.py).
        real = real_body(self.config, answer.body)
        if real is not None:
            answer = Answer(real, answer.headers, answer.players)
        version = self.profile_cache.take(rider, players)
        if not answer.players or (
            answer.headers is not None and LIVE_LAYER_HEADER in answer.headers
        ):
            return answer  # nothing to look up, or Redis is unreachable
        try:
            profiles = await self.profile_cache.profiles(
                self.speed.client, list(answer.players), version
            )
        except REDIS_DOWN:
            return answer
        return with_profiles(answer, profiles)

    def use_boards(self, config: BoardsConfig) -> None:
        """Answer from now on under ``config`` (a season promoted to another rule)."""
        self.config = config
        self._final.clear()

    # ------------------------------------------------------------- mode selection

    def _final_in_latest(self, board: str) -> bool:
        """True when the latest generation holds the board's final state: its
        speed-layer keys are gone (speed/closed.py) and the generation answers."""
        latest = self.registry.latest()
        if latest is None:
            return False
        key = str(latest.directory)
        final = self._final.get(key)
        if final is None:
            if len(self._final) > 16:
                self._final.clear()
            final = self._final[key] = frozenset(
                final_boards(self.config, latest.manifest)
            )
        return board in final

    def _snapshot_mode(self, board: str, mode: Mode, generation: str | None) -> bool:
        """Read a generation: asked for, pinned, or the board is closed and final."""
        return (
            mode == "snapshot" or generation is not None or self._final_in_latest(board)
        )

    def _fallback(self, board: str) -> Generation:
        """When exactness is impossible live: the latest generation."""
        try:
            return pin(self.registry, None)
        except GenerationNotFound:
            raise NotReady("a rebase is in progress; retry shortly") from None

    @staticmethod
    def answers(generation: Generation) -> SnapshotCache:
        """The generation's cache of encoded answers (it lives with the mapping)."""
        cache = generation.memo.get("answers")
        if cache is None:
            cache = generation.memo.setdefault("answers", SnapshotCache())
        return cache  # type: ignore[no-any-return]

    def _cached(
        self,
        generation: Generation,
        key: tuple[Any, ...],
        build: Callable[[], dict[str, Any]],
    ) -> Answer:
        cache = self.answers(generation)
        answer = cache.get(key)
        if answer is None:
            answer = cache.put(key, encode(build()))
        return answer

    # -------------------------------------------------------------------- ranking

    async def _ranked(
        self,
        board: str,
        mode: Mode,
        ranking: Ranking | None,
        kind: str,
        generation: str | None,
        read: Callable[[str | None], Answer | Awaitable[Answer]],
        native: Ranking | None = None,
    ) -> Answer:
        """The answer of ``read`` (its generation parameter: ``generation``) under
        ``ranking`` (None: the board's own), echoed as ``ranking``. Answers are
        built with the board's own ranking; another is computed from what is above
        the answer's first score (serving/ranking.py), counted in the answer's
        generation, or live as of the answer's ``asOf`` (speed/live.py ``above``):
        when the board moved in between, the read is made again, and after
        ``ATTEMPTS`` the latest generation answers, labelled snapshot."""
        check_board(self.config, board)
        if native is None:
            native = native_ranking(board_order(self.config, board)[1])
        if mode == "approx":
            if ranking not in (None, "competition"):
                raise InvalidRequest(
                    "mode=approx answers ranking=competition only", field="ranking"
                )
            return echo_ranking(await _answer(read(generation)), "competition")
        want = ranking or native
        if want == native:
            return echo_ranking(await _answer(read(generation)), want)
        for _ in range(ATTEMPTS):
            answer = await _answer(read(generation))
            ranked = await self._rerank(board, answer, want, kind)
            if ranked is not None:
                return ranked
        latest = self._fallback(board)
        answer = await _answer(read(latest.id))
        ranked = await self._rerank(board, answer, want, kind)
        if ranked is None:  # pragma: no cover - a generation does not move
            raise NotReady("the board kept changing; retry shortly")
        return ranked

    async def _rerank(
        self, board: str, answer: Answer, want: Ranking, kind: str
    ) -> Answer | None:
        """``answer`` with its ranks under ``want``; None when the live board moved
        since the answer was read (or it is approximate: a rebase under way)."""
        body = orjson.loads(answer.body)
        if body.get("basis") == "histogram":
            return None
        entries = body.get("entries")
        score: int | None = None
        if kind == "player":
            score = body["score"]
        elif kind in ("nearby", "entries") and entries and entries[0]["position"] > 1:
            score = entries[0]["score"]
        above = distinct = 0
        if score is not None:
            counted = await self._above(board, body, score)
            if counted is None:
                return None
            above, distinct = counted
        if kind == "player":
            body["rank"] = rank_of(want, body["position"], above, distinct)
            body["topPercent"] = top_percent(above + 1, body["population"])
        if entries:
            rerank(entries, want, above, distinct)
        body["ranking"] = want
        return Answer(orjson.dumps(body), answer.headers, answer.players)

    async def _above(
        self, board: str, body: dict[str, Any], score: int
    ) -> tuple[int, int] | None:
        """(players, distinct scores) above ``score`` where ``body`` was read: its
        generation, or live as of its ``asOf`` (None when the board moved since)."""
        generation = body.get("generation") or {}
        if body.get("basis") == "snapshot":
            segment = pin(self.registry, generation.get("id")).board(board)
            if segment is None:
                return 0, 0
            return segment.count_above(score), segment.distinct_above(score)
        try:
            live = await self.live.above(board, score)
        except (NotExact, *REDIS_DOWN):
            return None
        if live["asOf"] != body["asOf"] or live["generation"] != generation.get("id"):
            return None
        return live["above"], live["distinct"]

    # ------------------------------------------------------------------------ top

    def snapshot_top(
        self, board: str, mode: Mode, generation: Generation, limit: int
    ) -> Answer:
        def build() -> dict[str, Any]:
            segment = generation.board(board)
            population = segment.population if segment else 0
            entries = segment.entries(0, limit) if segment else []
            header = snapshot_header(board, mode, generation, population)
            return {**header, "entries": entries}

        return self._cached(generation, ("top", board, mode, limit), build)

    async def top(
        self,
        board: str,
        limit: int,
        mode: Mode,
        generation: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        return await self._ranked(
            board,
            mode,
            ranking,
            "top",
            generation,
            lambda g: self._top(board, limit, mode, g),
        )

    async def _top(
        self, board: str, limit: int, mode: Mode, generation: str | None
    ) -> Answer:
        check_board(self.config, board)
        if self._snapshot_mode(board, mode, generation):
            gen = pin(self.registry, generation)
            return self.snapshot_top(board, mode, gen, limit)
        # The histogram orders buckets, not players: a top list is always read live.
        key = (board, limit)
        cached = self.tops.fresh(key)
        if cached is not None and cached.headers is None:
            return cached
        try:
            stamp, _ = await self._stamp()
        except REDIS_DOWN:
            return self._degraded_top(board, mode, limit)
        current = self.tops.current(key, stamp)
        if current is not None:
            return current
        return await self.tops.compute(
            key, stamp, lambda: self._live_top(board, mode, limit, stamp)
        )

    async def _live_top(
        self, board: str, mode: Mode, limit: int, stamp: Stamp
    ) -> tuple[Answer, Stamp | None]:
        try:
            result = await self.live.top(board, limit)
        except NotExact:
            return self.snapshot_top(board, mode, self._fallback(board), limit), None
        except REDIS_DOWN:
            return self._degraded_top(board, mode, limit), None
        header = live_header(
            board, mode, result["base"], result["asOf"], result["population"]
        )
        answer = encode({**header, "entries": public(result["entries"])})
        base = result["base"].generation
        number = base.number if base is not None else 0
        # Exact for the bases and positions it read, and the flags and epoch as of
        # the stamp (read before it): any later change makes the stamps differ.
        exact_for = (
            *(number for _ in range(self.live.partitions)),
            *(int(result["asOf"][str(p)]) for p in range(self.live.partitions)),
            *stamp[-2:],
        )
        return answer, exact_for

    def _degraded_top(self, board: str, mode: Mode, limit: int) -> Answer:
        gen, segment = degraded_snapshot(self.config, self.registry, board, "top")
        population = segment.population if segment else 0
        entries = segment.entries(0, limit) if segment else []
        return degraded(
            {**snapshot_header(board, mode, gen, population), "entries": entries}
        )

    async def _stamp(
        self, fields: list[tuple[str, str]] | None = None
    ) -> tuple[Stamp, list[Any]]:
        """What a live answer depends on (:meth:`speed.live.LiveReader.stamp`)."""
        return await self.live.stamp(fields)

    # ----------------------------------------------------------------------- rank

    async def rank(
        self,
        board: str,
        player_id: str,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        return await self._ranked(
            board,
            mode,
            ranking,
            "player",
            generation,
            lambda g: self._rank(board, player_id, mode, g, viewer),
        )

    async def _rank(
        self,
        board: str,
        player_id: str,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
    ) -> Answer:
        check_board(self.config, board)
        own = is_own_read(viewer, player_id)
        if self._snapshot_mode(board, mode, generation):
            gen = pin(self.registry, generation)
            return self._snapshot_rank(board, player_id, mode, gen, own)
        try:
            if mode == "approx":
                return encode(await self.approx_rank(board, player_id, mode, own))
            return await self._live_rank(board, player_id, mode, own)
        except PlayerMissing:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}") from None
        except NotExact:
            try:
                return encode(await self.approx_rank(board, player_id, mode, own))
            except PlayerMissing:
                raise PlayerNotFound(
                    f"player {player_id!r} is not on {board}"
                ) from None
        except REDIS_DOWN:
            gen, segment = degraded_snapshot(self.config, self.registry, board, "rank")
            me = standing_in(segment, player_id, own)
            if segment is None or me is None:
                raise LiveUnavailable(
                    f"the live layer is unavailable and player {player_id!r} is "
                    f"not in {gen.id}"
                ) from None
            return degraded(self._rank_body(board, mode, gen, segment, player_id, me))

    def _rank_body(
        self,
        board: str,
        mode: Mode,
        gen: Generation,
        segment: BoardSegment,
        player_id: str,
        me: Standing,
    ) -> dict[str, Any]:
        population = segment.population + (1 if me.hidden else 0)
        return {
            **snapshot_header(board, mode, gen, population),
            "playerId": player_id,
            "score": me.score,
            "rank": me.rank,
            "position": me.row + 1,
            "topPercent": top_percent(me.rank, population),
        }

    def _snapshot_rank(
        self, board: str, player_id: str, mode: Mode, gen: Generation, own: bool
    ) -> Answer:
        cache = self.answers(gen)
        key = ("rank", board, mode, player_id, own)
        answer = cache.get(key)
        if answer is not None:
            return answer
        segment = gen.board(board)
        me = standing_in(segment, player_id, own)
        if segment is None or me is None:
            raise PlayerNotFound(f"player {player_id!r} is not on {board} in {gen.id}")
        body = self._rank_body(board, mode, gen, segment, player_id, me)
        return cache.put(key, encode(body))

    async def _live_rank(
        self, board: str, player_id: str, mode: Mode, own: bool
    ) -> Answer:
        try:
            result = await self.live.rank(board, player_id)
        except PlayerMissing:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}") from None
        _own_view_of_shadowed(result, board, player_id, own)
        header = live_header(
            board, mode, result["base"], result["asOf"], result["population"]
        )
        return encode(
            {
                **header,
                "playerId": player_id,
                "score": result["score"],
                "rank": result["rank"],
                "position": result["position"],
                "topPercent": top_percent(result["rank"], result["population"]),
            }
        )

    async def approx_rank(
        self, board: str, player_id: str, mode: Mode, own: bool
    ) -> dict[str, Any]:
        """Rank from the bucket histogram. One round trip reads the board's stamp
        (:meth:`_stamp`) and the player's total and flag; while the stamp equals
        the histogram's kept in the API (:mod:`api.approx`) that is all. Otherwise
        the histogram is read again (one more round trip, shared by concurrent
        reads), or, when that cannot help (a rebase under way, or the stamp moving
        faster than tables are worth reading), every partition's tree is asked
        around the score (:meth:`_approx_by_partition`)."""
        owner_p = partition_of(player_id, self.live.partitions)
        stamp, (raw, flag) = await self._stamp(
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
            "board": board,
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
        not; None when no histogram can be (see :meth:`approx_rank`)."""
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
        epoch read before the trees, as :meth:`_stamp` orders them). Without a
        generation the trees have one bucket (no boundaries)."""
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

    # --------------------------------------------------------------------- nearby

    async def nearby(
        self,
        board: str,
        player_id: str,
        radius: int,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        return await self._ranked(
            board,
            mode,
            ranking,
            "nearby",
            generation,
            lambda g: self._nearby(board, player_id, radius, mode, g, viewer),
        )

    async def _nearby(
        self,
        board: str,
        player_id: str,
        radius: int,
        mode: Mode,
        generation: str | None,
        viewer: str | None,
    ) -> Answer:
        check_board(self.config, board)
        own = is_own_read(viewer, player_id)
        if not self._snapshot_mode(board, mode, generation):
            try:
                return await self._live_nearby(board, player_id, radius, mode, own)
            except NotExact:
                gen = self._fallback(board)
                return self._snapshot_nearby(board, player_id, radius, mode, gen, own)
            except REDIS_DOWN:
                gen, segment = degraded_snapshot(
                    self.config, self.registry, board, "nearby"
                )
                me = standing_in(segment, player_id, own)
                if segment is None or me is None:
                    raise LiveUnavailable(
                        f"the live layer is unavailable and player {player_id!r} "
                        f"is not in {gen.id}"
                    ) from None
                body = self._nearby_body(board, player_id, radius, mode, gen, me)
                return degraded(body)
        gen = pin(self.registry, generation)
        return self._snapshot_nearby(board, player_id, radius, mode, gen, own)

    def _nearby_body(
        self,
        board: str,
        player_id: str,
        radius: int,
        mode: Mode,
        gen: Generation,
        me: Standing,
    ) -> dict[str, Any]:
        segment = gen.board(board)
        assert segment is not None
        entries, start, stop = window_entries(segment, me, player_id, radius)
        population = segment.population + (1 if me.hidden else 0)
        return {
            **snapshot_header(board, mode, gen, population),
            "playerId": player_id,
            "entries": entries,
            "cursors": segment_cursors(gen, board, segment, start, stop),
        }

    def _snapshot_nearby(
        self,
        board: str,
        player_id: str,
        radius: int,
        mode: Mode,
        gen: Generation,
        own: bool,
    ) -> Answer:
        cache = self.answers(gen)
        key = ("nearby", board, mode, player_id, radius, own)
        answer = cache.get(key)
        if answer is not None:
            return answer
        me = standing_in(gen.board(board), player_id, own)
        if me is None:
            raise PlayerNotFound(f"player {player_id!r} is not on {board} in {gen.id}")
        body = self._nearby_body(board, player_id, radius, mode, gen, me)
        return cache.put(key, encode(body))

    async def _live_nearby(
        self, board: str, player_id: str, radius: int, mode: Mode, own: bool
    ) -> Answer:
        try:
            result = await self.live.nearby(board, player_id, radius)
        except PlayerMissing:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}") from None
        _own_view_of_shadowed(result, board, player_id, own)
        header = live_header(
            board, mode, result["base"], result["asOf"], result["population"]
        )
        return encode(
            {
                **header,
                "playerId": player_id,
                "entries": public(result["entries"]),
                "cursors": live_cursors(
                    result["base"], board, result["entries"], result["population"]
                ),
            }
        )

    # -------------------------------------------------------------------- entries

    async def entries(
        self,
        board: str,
        cursor: str | None,
        limit: int,
        generation: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        """One page of a generation in display order; a cursor pins its generation."""
        return await self._ranked(
            board,
            "snapshot",
            ranking,
            "entries",
            generation,
            lambda g: self._entries(board, cursor, limit, g),
        )

    def _entries(
        self, board: str, cursor: str | None, limit: int, generation: str | None
    ) -> Answer:
        check_board(self.config, board)
        data: dict[str, Any] | None = None
        if cursor is not None:
            data = decode_cursor(cursor, board)
            if generation is not None and generation != data["g"]:
                raise InvalidRequest(
                    "cursor belongs to another generation", field="cursor"
                )
            gen = pin(self.registry, data["g"])
        else:
            gen = pin(self.registry, generation)

        def build() -> dict[str, Any]:
            segment = gen.board(board)
            population = segment.population if segment else 0
            if segment is None:
                start = stop = 0
            elif data is None:
                start, stop = 0, min(limit, population)
            elif data["d"] == "after":
                start = segment.first_row_after(data["s"], data["p"], data.get("t"))
                stop = min(population, start + limit)
            else:
                stop = segment.first_row_at_or_after(
                    data["s"], data["p"], data.get("t")
                )
                start = max(0, stop - limit)
            return {
                **snapshot_header(board, "snapshot", gen, population),
                "entries": segment.entries(start, stop) if segment else [],
                "cursors": segment_cursors(gen, board, segment, start, stop),
            }

        # Keyed by the position, not the cursor's text: equal positions (however
        # the cursor's JSON was spaced) share one entry.
        position = None
        if data is not None:
            position = (data["s"], data["p"], data["d"], data.get("t"))
        return self._cached(gen, ("entries", board, position, limit), build)

    # -------------------------------------------------------------------- friends

    async def friends(
        self,
        board: str,
        player_id: str,
        mode: Literal["live", "snapshot"],
        generation: str | None,
        ranking: Ranking | None = None,
    ) -> Answer:
        """The player and friends ranked among themselves (the caller checked the
        player's token). Shadowed friends are hidden; the player sees itself."""
        return await self._ranked(
            board,
            mode,
            ranking,
            "friends",
            generation,
            lambda g: self._friends(board, player_id, mode, g),
            native="competition",
        )

    async def _friends(
        self,
        board: str,
        player_id: str,
        mode: Literal["live", "snapshot"],
        generation: str | None,
    ) -> Answer:
        check_board(self.config, board)
        friends = await read_friends(self.live, player_id)
        hidden = await shadowed_among(self.speed, friends)
        members = [player_id, *(f for f in friends if f not in hidden)]
        if mode == "live" and generation is None:
            try:
                scores, base, as_of = await self.friends_reader.live_scores(
                    board, members
                )
            except NotExact:
                gen = self._fallback(board)
                scores = self._member_scores(gen.board(board), members)
                header = snapshot_header(board, mode, gen, len(scores))
            else:
                header = live_header(board, mode, base, as_of, len(scores))
        else:
            gen = pin(self.registry, generation)
            scores = self._member_scores(gen.board(board), members)
            header = snapshot_header(board, mode, gen, len(scores))
        if player_id not in scores:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}")
        return encode(
            {**header, "playerId": player_id, "entries": rank_members(scores)}
        )

    @staticmethod
    def _member_scores(
        segment: BoardSegment | None, members: list[str]
    ) -> dict[str, int]:
        scores = snapshot_scores(segment, members)
        # The player itself (members[0]) is on its own list even when shadowed in
        # this generation.
        if segment is not None and members and members[0] not in scores:
            hidden = segment.hidden.get(members[0])
            if hidden is not None:
                scores[members[0]] = hidden
        return scores

    # --------------------------------------------------------------------- awards

    def awards(
        self, board: str, version: int | None, cursor: str | None, limit: int
    ) -> Answer:
        """A page of a closed season's award snapshot; a version never changes,
        so its pages are encoded once and kept."""
        key: tuple[Any, ...] = (board, version, cursor, limit)
        if cursor is not None:
            # By position, not the cursor's text (equal positions share one entry);
            # a bad cursor is _award_page's to refuse, after the board's check.
            with contextlib.suppress(InvalidRequest):
                data = decode_award_cursor(cursor, board)
                key = (board, version, (data["v"], data["o"], data["d"]), limit)
        answer = self._award_pages.get(key)
        if answer is None:
            body = self._award_page(board, version, cursor, limit)
            # Only pinned versions are fixed: "latest" moves with an adjudication.
            answer = encode(body)
            if version is not None or cursor is not None:
                self._award_pages.put(key, answer)
        return answer

    def _award_page(
        self, board: str, version: int | None, cursor: str | None, limit: int
    ) -> dict[str, Any]:
        described = describe_board(self.config, board)
        if described is None or described["window"] != "season":
            raise AwardsNotFound(f"{board!r} is not a season board with awards")
        season_id = described["period"]
        if cursor is not None:
            data = decode_award_cursor(cursor, board)
            if version is not None and version != data["v"]:
                raise InvalidRequest(
                    "cursor belongs to another version", field="cursor"
                )
            version = data["v"]
        found = read_version(self.data_dir, season_id, version)
        if found is None:
            what = f"version {version} of " if version is not None else ""
            raise AwardsNotFound(f"no {what}award snapshot for season {season_id}")
        if cursor is None:
            start, stop = 0, limit
        elif data["d"] == "after":
            start = data["o"]
            stop = start + limit
        else:
            stop = data["o"] - 1
            start = max(0, stop - limit)
        entries, population = award_page(found, board, start, stop)
        first = entries[0]["position"] if entries else None
        last = entries[-1]["position"] if entries else None
        meta = found.meta
        return {
            "board": board,
            "season": season_id,
            "version": found.version,
            "generation": meta["generation"],
            "boundary": meta["boundary"],
            "hash": meta["hash"],
            "closedAt": meta["closedAt"],
            "rule": meta["rule"],
            "tieBreak": meta["tieBreak"],
            "population": population,
            "entries": entries,
            "cursors": {
                "before": award_cursor(board, found.version, first, "before")
                if first is not None and first > 1
                else None,
                "after": award_cursor(board, found.version, last, "after")
                if last is not None and last < population
                else None,
            },
        }


def _int(value: Any) -> int:
    return int(value.decode() if isinstance(value, bytes) else value)


async def _answer(read: Answer | Awaitable[Answer]) -> Answer:
    return read if isinstance(read, Answer) else await read


def echo_ranking(answer: Answer, ranking: Ranking) -> Answer:
    """The answer naming its ranking (appended to the encoded object: no decode)."""
    tail = b'"ranking":"' + ranking.encode() + b'"}'
    body = answer.body[:-1] + (b"," if len(answer.body) > 2 else b"") + tail
    return Answer(body, answer.headers, answer.players)


def _own_view_of_shadowed(
    result: dict[str, Any], board: str, player_id: str, own: bool
) -> None:
    """A shadowed player is hidden from everyone but itself: others get 404; its
    own live read answers as if present, so it is counted back in the population
    (its own standing and window already hold it)."""
    if not result["shadowed"]:
        return
    if not own:
        raise PlayerNotFound(f"player {player_id!r} is not on {board}")
    result["population"] += 1
