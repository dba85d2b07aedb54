"""A small pure-Python writer of the serving-segment format, for API tests that need a
generation without running Spark (the Spark publisher is tested in tests/jobs)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

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
) -> str:
    gen = f"g{number}"
    directory = segments_dir / gen
    directory.mkdir(parents=True)
    meta = {}
    for board, totals in boards.items():
        ordered = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0].encode()))
        _write(
            directory / f"{board}.arrow",
            pa.table(
                {
                    "player_id": pa.array([p for p, _ in ordered], pa.string()),
                    "score": pa.array([s for _, s in ordered], pa.int64()),
                }
            ),
        )
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
    (directory / "manifest.json").write_bytes(orjson.dumps(manifest))
    return gen
