"""A small pure-Python writer of the serving-segment format, for API tests that need a
generation without running Spark (the Spark publisher is tested in tests/jobs)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa


def _write(path: Path, table: pa.Table) -> None:
    with pa.ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)


def equi_depth(scores: list[int], target: int) -> tuple[list[int], list[int]]:
    """Bucket lower bounds (ascending, distinct) and counts, ~target per bucket."""
    counts: dict[int, int] = {}
    for score in scores:
        counts[score] = counts.get(score, 0) + 1
    lowers: list[int] = []
    sizes: list[int] = []
    for score in sorted(counts):
        if not lowers or sizes[-1] >= target:
            lowers.append(score)
            sizes.append(0)
        sizes[-1] += counts[score]
    return lowers, sizes


def write_generation(
    segments_dir: Path,
    number: int,
    boards: dict[str, dict[str, int]],
    boundary: dict[str, int] | None = None,
    bucket_target: int | None = None,
    achieved: dict[str, dict[str, int]] | None = None,
    versions: dict[str, dict[str, int]] | None = None,
    quarantine: dict[str, dict[str, int]] | None = None,
) -> str:
    """``achieved``: per first_achieved board, when each player reached its score;
    those boards are ordered by (score desc, achieved, player) and carry the column.
    ``versions``: per board, each player's version at the boundary (the ``version``
    column; a board not named has none, as segments written before it).
    ``quarantine``: the manifest's thresholds, board -> cohort -> points above
    which the speed layer holds an event (none when not given)."""
    gen = f"g{number}"
    directory = segments_dir / gen
    directory.mkdir(parents=True)
    meta = {}
    for board, totals in boards.items():
        times = (achieved or {}).get(board)
        ordered = sorted(
            totals.items(),
            key=lambda kv: (-kv[1], times[kv[0]] if times else 0, kv[0].encode()),
        )
        columns = {
            "player_id": pa.array([p for p, _ in ordered], pa.string()),
            "score": pa.array([s for _, s in ordered], pa.int64()),
        }
        if times is not None:
            columns["achieved_ms"] = pa.array(
                [times[p] for p, _ in ordered], pa.int64()
            )
        known = (versions or {}).get(board)
        if known is not None:
            columns["version"] = pa.array(
                [known.get(p, 0) for p, _ in ordered], pa.int64()
            )
        _write(directory / f"{board}.arrow", pa.table(columns))
        rows = sorted(range(len(ordered)), key=lambda i: ordered[i][0].encode())
        _write(
            directory / f"{board}.index.arrow",
            pa.table({"row": pa.array(rows, pa.uint32())}),
        )
        meta[board] = {
            "population": len(ordered),
            "file": f"{board}.arrow",
            "index": f"{board}.index.arrow",
        }
        if times is not None:
            meta[board]["tieBreak"] = "first_achieved"
        if bucket_target is not None:
            lowers, sizes = equi_depth(list(totals.values()), bucket_target)
            _write(
                directory / f"{board}.buckets.arrow",
                pa.table(
                    {
                        "lower": pa.array(lowers, pa.int64()),
                        "count": pa.array(sizes, pa.int64()),
                    }
                ),
            )
            meta[board]["buckets"] = f"{board}.buckets.arrow"
    manifest = {
        "generation": gen,
        "publishedAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "boundary": boundary or {"0": 0},
        "complete": True,
        "boards": meta,
    }
    if quarantine:
        manifest["quarantine"] = quarantine
    (directory / "manifest.json").write_bytes(orjson.dumps(manifest))
    return gen


def write_contributions(
    segments_dir: Path,
    number: int,
    records: list[dict[str, Any]],
    parent: int | None,
    compact: bool = False,
) -> dict[str, Any]:
    """Add generation g<number>'s contributions index (serving/contributions.py,
    the production writer) to its manifest: ``records`` are the log records (each
    with ``partition``, ``position`` and ``event.playerId``) landed since
    g<parent>'s boundary (every one when ``parent`` is None)."""
    from serving.contributions import record_contributions, write_index

    directory = segments_dir / f"g{number}"
    items = [
        item
        for r in records
        for item in record_contributions(
            r, r["event"]["playerId"], r["partition"], r["position"]
        )
    ]
    before = None
    if parent is not None:
        parent_dir = segments_dir / f"g{parent}"
        before = (parent_dir, orjson.loads((parent_dir / "manifest.json").read_bytes()))
    entry = write_index(directory, f"g{number}", items, before, compact=compact)
    manifest = orjson.loads((directory / "manifest.json").read_bytes())
    manifest["contributions"] = entry
    (directory / "manifest.json").write_bytes(orjson.dumps(manifest))
    return entry
