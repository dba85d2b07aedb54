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
generation with an index).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.settings import Settings
from jobs.land import bronze_path, log_rows_in_order, table_exists
from jobs.publish_lock import scratch_dir
from jobs.recompute import transform_between_boundaries
from serving.landed import (
    MAX_CHAIN,
    Entry,
    chain_of,
    compact_layers,
    layer_file,
    link_chain,
    manifest_entry,
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


def write_landed_index(
    settings: Settings,
    spark: SparkSession,
    generation: str,
    number: int,
    boundary: Mapping[int, int],
    directory: Path,
    *,
    compact: bool = False,
) -> dict[str, Any] | None:
    """Write the generation's index into ``directory`` (its temp directory);
    returns its manifest entry, None when no complete index can be written."""
    lifetime_ms = settings.record_ttl_seconds * 1000
    now_ms = int(time.time() * 1000)
    parent = parent_generation(settings.segments_dir, number)
    chain: list[str] = []
    after: Mapping[int, int] = {}
    since_ms: int | None = None
    if parent is not None and chain_of(parent[1]) is not None:
        parent_dir, manifest = parent
        chain = chain_of(manifest) or []
        after = {int(p): int(v) for p, v in manifest.get("boundary", {}).items()}
    else:
        # No parent index: every landed record still inside its lifetime.
        since_ms = now_ms - lifetime_ms
    entries: list[Entry] = []
    path = bronze_path(settings)
    if table_exists(path):
        bronze = spark.read.format("delta").load(str(path))
        delta = transform_between_boundaries(bronze, after, boundary)
        if since_ms is not None:
            delta = delta.where(F.col("received_at_ms") >= F.lit(since_ms))
        rows = delta.select("partition", "position", "raw")
        for row in log_rows_in_order(rows, after, boundary, scratch_dir(settings)):
            record = orjson.loads(row["raw"])
            if "rc" not in record:
                return None  # logged before the index existed: keep Redis's records
            entries += [Entry(*e) for e in landed_entries(record)]
    if chain:
        link_chain(parent[0], directory, chain)  # type: ignore[index]
    own = layer_file(generation)
    _, count = write_layer(directory / own, entries)
    layers = [*chain, own]
    if compact or len(layers) > MAX_CHAIN:
        merged = directory / f".{own}.merged"
        _, count = compact_layers(directory, layers, merged, now_ms - lifetime_ms)
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
