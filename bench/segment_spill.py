"""One segment writer task's memory and time, its rows held or spilled.

    python -m bench.segment_spill --boards 4 --rows-per-board 6000000

A full publish writes each board's segment files in a Spark task
(jobs/segment_tasks.py ``segment_writer``, a ``mapInArrow`` function); a task
takes every board its hash partition got. This bench calls that function as Spark
would, with Arrow batches of 10,000 rows (Spark's ``maxRecordsPerBatch``), boards
interleaved, made as they are consumed (so the stream itself holds nothing), once
per variant in a process of its own: ``held`` (the threshold above the task's rows:
every row in memory at once) and ``spilled`` (``SPILL_ROWS``: each board's rows
moved to a file of its own, one board written at a time). Per variant: the wall
time and the process's peak resident memory; the written files are compared.

``spilled`` spills only when the task holds more rows than its threshold: a small
run (``--rows-per-board 15000``) needs ``--spill-rows`` below its rows, or both
variants hold every row and the comparison says nothing (each variant's line
prints ``spills``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.harness import loadavg_text
from jobs.segment_tasks import ITEMS_SCHEMA, KIND_ROW, SPILL_ROWS, segment_writer

BATCH = 10_000


def stream(boards: int, rows_per_board: int) -> Iterator[pa.RecordBatch]:
    """The task's rows in batches, the boards taking turns: board b's rows are its
    players 0..n-1 in rank order (position i, score n - i)."""
    for start in range(0, rows_per_board, BATCH):
        n = min(BATCH, rows_per_board - start)
        positions = np.arange(start, start + n, dtype=np.int64)
        players = pc.binary_join_element_wise(
            "p", pc.cast(pa.array(positions), pa.string()), ""
        )
        for b in range(boards):
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([f"season:S{b}:global"] * n, pa.string()),
                    pa.array(positions),
                    players,
                    pa.array(rows_per_board - positions),
                    pa.nulls(n, pa.int64()),
                    pa.array(np.full(n, KIND_ROW, dtype=np.int32)),
                    pa.nulls(n, pa.int64()),
                ],
                schema=ITEMS_SCHEMA,
            )


def run_variant(
    variant: str, boards: int, rows_per_board: int, out: Path, spill_rows: int
) -> None:
    """One variant in this process: prints its JSON line."""
    out.mkdir(parents=True)
    rows = boards * rows_per_board
    threshold = rows + 1 if variant == "held" else spill_rows
    writer = segment_writer(str(out), 1_000, {}, 0o027, spill_rows=threshold)
    began = time.perf_counter()
    written = [
        row for b in writer(stream(boards, rows_per_board)) for row in b.to_pylist()
    ]
    seconds = time.perf_counter() - began
    digest = hashlib.sha256()
    for path in sorted(out.iterdir()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    print(
        json.dumps(
            {
                "variant": variant,
                "spill_rows": threshold,
                "spills": rows > threshold,
                "seconds": round(seconds, 2),
                "peak_rss_mb": round(
                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
                ),
                "boards_written": len(written),
                "files_sha256": digest.hexdigest(),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--boards", type=int, default=4)
    parser.add_argument("--rows-per-board", type=int, default=6_000_000)
    parser.add_argument("--variants", default="held,spilled")
    parser.add_argument(
        "--spill-rows",
        type=int,
        default=SPILL_ROWS,
        help="the spilled variant's threshold (default: the writer's, SPILL_ROWS)",
    )
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one, in a child
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        run_variant(
            args.variant, args.boards, args.rows_per_board, args.out, args.spill_rows
        )
        return
    print(f"load at the start: {loadavg_text()}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="lb-spill-") as scratch:
        for variant in args.variants.split(","):
            child = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.segment_spill",
                    "--boards",
                    str(args.boards),
                    "--rows-per-board",
                    str(args.rows_per_board),
                    "--spill-rows",
                    str(args.spill_rows),
                    "--variant",
                    variant,
                    "--out",
                    str(Path(scratch) / variant),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            results.append(json.loads(child.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    digests = {r["files_sha256"] for r in results}
    print(f"files identical across variants: {len(digests) == 1}")
    print(f"load at the end: {loadavg_text()}")


if __name__ == "__main__":
    main()
