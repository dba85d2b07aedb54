"""A generation's landed records index (serving/landed.py owns the format).

Each publish writes one layer: the dedupe and contribution records of the log
records it landed since its parent generation's boundary (bronze ``raw`` is the log
record; :func:`speed.records.landed_entries` derives the entries from one), and
hard-links the parent's chain. When the chain grows past
:data:`serving.landed.MAX_CHAIN` (or on ``lb publish --compact``) it is merged into
one layer, dropping the records last written before the dedupe window.

Without a parent index (the first publish, or a parent written before the index)
the layer holds every landed record still inside the record lifetime. A landed
record without its contribution value (``rc``, logged by apply_event.lua from this
change on) inside that range makes the index incomplete: none is written, and the
speed layer keeps every record in Redis (speed/rebase.py drops records only for a
generation with an index). The manifest then says when the newest such record was
received, so that the next publishes, while it is still inside the lifetime, know
without reading the whole lifetime of the log again that they cannot write one
either (a cost that would follow the history, not the change).

The log records come from jobs/record_indexes.py, which reads bronze once for
this index and the contributions index.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conf.settings import Settings
from serving.landed import (
    MAX_CHAIN,
    Entry,
    chain_of,
    compact_layers,
    layer_file,
    link_chain,
    manifest_entry,
    unindexed_entry,
    unindexed_through,
    write_layer,
)
from serving.manifest import generation_number, read_manifest
from speed.records import landed_entries


def parent_generation(
    segments_dir: Path, number: int
) -> tuple[Path, dict[str, Any]] | None:
    """The newest published generation before ``number`` (directory, manifest)."""
    best: tuple[int, Path, dict[str, Any]] | None = None
    for child in segments_dir.iterdir():
        n = generation_number(child.name)
        if n is None or n >= number or (best is not None and n <= best[0]):
            continue
        manifest = read_manifest(child)
        if manifest is not None:
            best = (n, child, manifest)
    return None if best is None else (best[1], best[2])


@dataclass
class LandedIndexWriter:
    """One generation's landed records index while its publish reads the log: the
    parent's chain it extends, which records it takes (after the parent's
    boundary; without a parent index, every one received within the record
    lifetime), and the entries taken so far."""

    after: Mapping[int, int]
    since_ms: int | None
    parent_dir: Path | None
    chain: list[str]
    cutoff_ms: int  # records last written before it leave at a compaction
    entries: list[Entry] = field(default_factory=list)
    # False once a taken record has no ``rc`` (logged before the index existed):
    # no complete index, the speed layer keeps Redis's records.
    complete: bool = True
    # When the newest such record was received (ms), as far as known.
    unindexed_through_ms: int | None = None

    @classmethod
    def plan(
        cls, settings: Settings, parent: tuple[Path, dict[str, Any]] | None
    ) -> LandedIndexWriter:
        """The index of a generation over ``parent``, its newest published one
        (:func:`parent_generation`: directory, manifest), if any."""
        lifetime_ms = settings.record_ttl_seconds * 1000
        now_ms = int(time.time() * 1000)
        since_ms = now_ms - lifetime_ms
        if parent is not None and chain_of(parent[1]) is not None:
            parent_dir, manifest = parent
            after = {int(p): int(v) for p, v in manifest.get("boundary", {}).items()}
            chain = chain_of(manifest) or []
            return cls(after, None, parent_dir, chain, since_ms)
        through = None if parent is None else unindexed_through(parent[1])
        if through is not None and through >= since_ms:
            # The parent's record without rc is still within the lifetime, and so
            # within this index's range: incomplete, known without a read.
            return cls({}, since_ms, None, [], since_ms, [], False, through)
        return cls({}, since_ms, None, [], since_ms)

    def unindexed(self, through_ms: int) -> None:
        """Records without ``rc`` were landed in this index's range, the newest
        received at ``through_ms``: no index."""
        if self.complete:
            self.complete, self.entries = False, []
        if self.unindexed_through_ms is None or through_ms > self.unindexed_through_ms:
            # A first publish's shared read calls this for each such record.
            self.unindexed_through_ms = through_ms

    def take(
        self, partition: int, position: int, received_at_ms: int | None, record: Any
    ) -> None:
        """A log record read in log order (``record``: bronze ``raw`` parsed). A
        row without ``received_at_ms`` is outside any lifetime, as Spark's
        filter has it."""
        if position <= int(self.after.get(partition, 0)):
            return
        if self.since_ms is not None and (
            received_at_ms is None or received_at_ms < self.since_ms
        ):
            return
        if "rc" not in record:
            self.unindexed(received_at_ms or 0)
            return
        if self.complete:
            self.entries += [Entry(*e) for e in landed_entries(record)]

    def write(
        self, directory: Path, generation: str, *, compact: bool = False
    ) -> dict[str, Any] | None:
        """Write the index into ``directory`` (the generation's temp directory);
        returns its manifest entry: the chain, or, when no complete index can be
        written, when its newest record without ``rc`` was received (None when
        unknown)."""
        if not self.complete:
            through = self.unindexed_through_ms
            return None if through is None else unindexed_entry(through)
        if self.chain:
            link_chain(self.parent_dir, directory, self.chain)  # type: ignore[arg-type]
        own = layer_file(generation)
        _, count = write_layer(directory / own, self.entries)
        layers = [*self.chain, own]
        if compact or len(layers) > MAX_CHAIN:
            merged = directory / f".{own}.merged"
            _, count = compact_layers(directory, layers, merged, self.cutoff_ms)
            for name in layers:
                (directory / name).unlink()
            os.rename(merged, directory / own)
            layers = [own]
        else:
            count = sum(_rows(directory / name) for name in layers)
        return manifest_entry(layers, count)


def _rows(path: Path) -> int:
    from serving.files import read_arrow

    return read_arrow(path).num_rows
