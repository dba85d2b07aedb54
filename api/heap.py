"""The API worker's heap and the cyclic garbage collector.

A full (generation-2) collection walks every tracked object not frozen. The worker
freezes its start-up heap (api/main.py), but what it builds while serving (the
mapped generations' per-board state, the live reader's kept standings and change
sets, the answer caches) is long-lived too, and a full pass over it took 15-30 ms of
CPU at 200,000 players and 32-73 ms of wall time at 1,000,000: one such pause queues
every read behind it, and the phases with full collections were the ones whose p99
missed 10 ms (bench/history/2026-12-03-2-session-17.md). Survivors of a full
collection are by definition reachable, so moving them to the permanent generation
loses nothing at that moment; later full passes then walk only what is newer
(0.3-0.6 ms measured after the first).

The cost: an object frozen while alive that later becomes part of a reference
cycle is not reclaimed while frozen (acyclic garbage is still freed by reference
counting). So every ``refresh_s`` seconds the permanent generation is thawed and the
next full collection walks, and reclaims, everything once.
"""

from __future__ import annotations

import gc
import random
import time
from typing import Any

# One full walk of everything (the pause the freezing avoids) per this many seconds.
REFRESH_S = 600.0
# Each worker's youngest-generation threshold is CPython's default times a factor
# drawn once in this range (desynchronized_threshold; not the current threshold
# times it: an app built again in one process, as the tests do, would drift).
DEFAULT_THRESHOLD = 700
THRESHOLD_SPREAD = (0.75, 1.25)
# Each thaw waits REFRESH_S times a factor drawn per thaw in this range.
THAW_SPREAD = (0.8, 1.2)


def desynchronized_threshold(rng: random.Random) -> int:
    """A youngest-generation threshold for this worker, drawn around the default.

    Why: the workers serve the same mix at the same rate, so with equal thresholds
    they reach their full collections together. In the quiet read bench at
    200,000 players (session 20, `bench/history/2026-12-03-8-session-20.md`) both
    workers ran a full collection of ~16 ms in the same 100 ms of the live rank
    phase: every connection stalled at once and that one window held 41 of its
    requests over 20 ms. With thresholds apart, one worker keeps serving while the
    other collects. The spread changes how often each collects by at most a
    quarter, not what it reclaims."""
    low, high = THRESHOLD_SPREAD
    return round(DEFAULT_THRESHOLD * rng.uniform(low, high))


class GcCallback:
    """A ``gc.callbacks`` entry (``__call__(phase, info)``), installed once."""

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        raise NotImplementedError

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


class SurvivorFreezer(GcCallback):
    """A ``gc.callbacks`` entry: after each full collection, freeze its survivors;
    every ``refresh_s``, thaw them so the next full collection sees all."""

    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self._thawed_at = time.monotonic()
        # Each thaw at refresh_s give or take a fifth, drawn per thaw: the
        # workers' full walks of everything (the longest pauses) fall apart, as
        # their thresholds do (desynchronized_threshold).
        self._rng = random.Random()
        self._factor = self._rng.uniform(*THAW_SPREAD)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        now = time.monotonic()
        if now - self._thawed_at >= self.refresh_s * self._factor:
            # The next full collection walks everything, including cycles formed
            # among frozen objects since the last thaw; it freezes again after.
            self._thawed_at = now
            self._factor = self._rng.uniform(*THAW_SPREAD)
            gc.unfreeze()
        else:
            gc.freeze()
