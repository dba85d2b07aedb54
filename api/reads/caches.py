"""The read caches: encoded snapshot answers per generation, live top lists."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from api.approx import Stamp
from api.metrics import READ_CACHE
from api.reads.answers import Answer

SNAPSHOT_HITS = READ_CACHE.labels("snapshot", "hit")
SNAPSHOT_MISSES = READ_CACHE.labels("snapshot", "miss")
LIVE_HITS = READ_CACHE.labels("live_top", "hit")
LIVE_MISSES = READ_CACHE.labels("live_top", "miss")


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
