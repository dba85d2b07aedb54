"""api/heap.py: survivors of a full collection are frozen (later full passes walk
only what is newer), and a thaw lets a full collection reclaim cycles formed among
frozen objects."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from api.heap import SurvivorFreezer

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
