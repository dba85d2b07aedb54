"""The approximate rank's histogram, summed over partitions and kept in the API.

Every partition keeps a Fenwick tree of its players per score bucket (bucket
boundaries from the base generation, :func:`speed.rebase.bucket_lowers`). Asking
every partition's tree on each approximate read cost as much as the exact rank
(bench/RESULTS.md, issue 13). Instead the API reads every tree whole once
(``approx_table.lua``, one reply per partition), sums them into one cumulative
count per bucket, and keeps that :class:`Histogram` per board together with the
stamp it is exact for: every partition's base generation and log position, the
flags version and the dataset's epoch, the same stamp a cached live top list is
checked against (:meth:`speed.live.LiveReader.stamp`). Every change to a tree
(an applied event, a flag, a rebase) moves one of those, so while the stamp a read
sees equals the histogram's, the histogram is the current one and the read needs
only the stamp and the player's total: one round trip, no histogram work in Redis.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

Stamp = tuple[int, ...]


class TreeSizeError(ValueError):
    """A Fenwick tree with more slots than its generation's buckets."""


def tree_counts(tree: bytes, size: int) -> np.ndarray:
    """Players per bucket (int64, ``size`` of them) of one Fenwick tree as stored:
    i32 big-endian per slot, slot i (1-based) covering buckets (i - lowbit(i), i];
    trailing slots never written are absent (0)."""
    if len(tree) % 4 or len(tree) > 4 * size:
        raise TreeSizeError(f"a {len(tree)}-byte tree for {size} buckets")
    slots = np.zeros(size, dtype=np.int64)
    slots[: len(tree) // 4] = np.frombuffer(tree, dtype=">i4")
    # A bucket's count is its slot minus the slots of its children (the slots i
    # with i + lowbit(i) == its index): those hold the rest of its range.
    index = np.arange(1, size + 1, dtype=np.int64)
    parent = index + (index & -index)
    inside = parent <= size
    counts = slots.copy()
    np.subtract.at(counts, parent[inside] - 1, slots[inside])
    return counts


@dataclass(frozen=True, slots=True)
class Histogram:
    """One board's players per bucket over every partition, exact for ``stamp``."""

    stamp: Stamp
    generation: int
    lowers: list[int]
    # cumulative[b] = players in buckets 1..b+1 (1-based buckets, as the Lua's).
    cumulative: np.ndarray

    @classmethod
    def of(
        cls, stamp: Stamp, generation: int, lowers: list[int], trees: list[bytes]
    ) -> Histogram:
        size = max(1, len(lowers))
        counts = np.zeros(size, dtype=np.int64)
        for tree in trees:
            counts += tree_counts(tree, size)
        return cls(stamp, generation, lowers, np.cumsum(counts))

    @property
    def population(self) -> int:
        return int(self.cumulative[-1])

    def bucket(self, score: int) -> int:
        """The 1-based bucket of ``score`` (as speed.rebase.partition_counts puts
        it, clipped into range)."""
        return min(
            max(1, bisect.bisect_right(self.lowers, score)), len(self.cumulative)
        )

    def around(self, score: int) -> tuple[int, int]:
        """(players in higher buckets, players in the score's bucket)."""
        b = self.bucket(score)
        upto = int(self.cumulative[b - 1])
        below = int(self.cumulative[b - 2]) if b > 1 else 0
        return self.population - upto, upto - below
