"""api/heap.py: survivors of a full collection are frozen (later full passes walk
only what is newer), and a thaw lets a full collection reclaim cycles formed among
frozen objects."""

from __future__ import annotations

import gc
import random
import weakref
from collections.abc import Iterator

import pytest

from api.heap import (
    DEFAULT_THRESHOLD,
    THRESHOLD_SPREAD,
    SurvivorFreezer,
    desynchronized_threshold,
)

pytestmark = pytest.mark.unit


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def freezer() -> Iterator[SurvivorFreezer]:
    gc.unfreeze()
    freezer = SurvivorFreezer(refresh_s=3600.0)
    freezer.install()
    try:
        yield freezer
    finally:
        freezer.remove()
        gc.unfreeze()


def tracked_by_collector(obj: object) -> bool:
    """Whether a full collection would walk ``obj`` (it is in a generation)."""
    return any(o is obj for g in range(3) for o in gc.get_objects(g))


def test_survivors_of_a_full_collection_are_frozen(freezer: SurvivorFreezer) -> None:
    kept = Node()
    assert tracked_by_collector(kept)
    gc.collect()
    assert gc.get_freeze_count() > 0
    assert not tracked_by_collector(kept)
    newer = Node()
    assert tracked_by_collector(newer)


def test_a_younger_collection_freezes_nothing(freezer: SurvivorFreezer) -> None:
    kept = Node()
    gc.collect(0)
    assert tracked_by_collector(kept) and gc.get_freeze_count() == 0


def test_a_thaw_reclaims_cycles_formed_among_frozen_objects(
    freezer: SurvivorFreezer,
) -> None:
    a, b = Node(), Node()
    gc.collect()  # both survive: frozen
    a.other, b.other = b, a  # now a cycle ...
    gone = weakref.ref(a)
    del a, b  # ... and garbage only the cyclic collector can find
    gc.collect()
    assert gone() is not None  # frozen: not walked, not reclaimed (the cost)
    freezer.refresh_s = 0.0
    gc.collect()  # this full collection's end thaws the permanent generation
    assert gc.get_freeze_count() == 0
    freezer.refresh_s = 3600.0
    gc.collect()  # walks everything: the cycle goes; its survivors are frozen again
    assert gone() is None
    assert gc.get_freeze_count() > 0


def test_workers_draw_their_own_thresholds_around_the_default() -> None:
    """Workers serving the same mix reach full collections together unless their
    thresholds differ (api/heap.py desynchronized_threshold): each draws its own,
    within a quarter of CPython's default, however often an app is built."""
    low, high = (round(DEFAULT_THRESHOLD * f) for f in THRESHOLD_SPREAD)
    drawn = {desynchronized_threshold(random.Random(seed)) for seed in range(20)}
    assert all(low <= t <= high for t in drawn)
    assert len(drawn) > 10


def test_thaws_fall_at_their_own_times(freezer: SurvivorFreezer) -> None:
    """Each thaw waits refresh_s give or take a fifth, drawn per thaw, so that the
    workers' full walks of everything do not coincide either."""
    factors = set()
    freezer.refresh_s = 0.0
    for _ in range(5):
        gc.collect()  # thaws (refresh_s 0) and draws the next factor
        factors.add(freezer._factor)
    assert all(0.8 <= f <= 1.2 for f in factors) and len(factors) == 5
