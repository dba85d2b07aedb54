"""Many players' rows on one board at once: ``row_of`` each against ``rows_of``'s
two ways (serving/segments.py), on a board of ``--players`` rows.

    python -m bench.rows_of [--players 1000000] [--asked 2000 16000 32000 100000]

Why: a layered publish looks up every changed or named player of a board in its
parent (serving/layers.py ``apply_changes``; about 0.8 M look-ups per generation
at the 1 M-player publish bench), and a layered segment finds its removed rows so.
``rows_of`` takes a binary search of all of them for up to 1 / ``HASH_PASS_RATIO``
of the board and one hash pass over its ids past that; this prints the times that
ratio comes from (best of ``--repeat``, milliseconds) and one ``row_of`` per
player's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from serving.segments import (
    HASH_PASS_RATIO,
    BoardSegment,
    board_entry,
    write_board_segment,
)


def best_ms(call: Callable[..., object], repeat: int, *args: object) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call(*args)
        times.append(time.perf_counter() - start)
    return round(min(times) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--asked", type=int, nargs="+", default=[2000, 16000, 32000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    n = args.players
    players = [f"p{i:07d}" for i in rng.permutation(n)]
    scores = np.sort(rng.integers(0, 5000, n))[::-1]
    with tempfile.TemporaryDirectory(prefix="rows-of-") as tmp:
        directory = Path(tmp)
        sums = write_board_segment(
            directory, "b", pa.array(players), pa.array(scores, pa.int64()), 64
        )
        board = BoardSegment.load(directory, "b", board_entry("b", n, sums))
        sample = sorted(players[i] for i in rng.integers(0, n, 2000))
        per_row_of = best_ms(lambda: [board.row_of(p) for p in sample], args.repeat)
        print(f"board of {n} rows; HASH_PASS_RATIO {HASH_PASS_RATIO}")
        print(f"row_of each: {per_row_of / len(sample) * 1000:.1f} us per player")
        for asked in args.asked:
            wanted = sorted({players[i] for i in rng.integers(0, n, asked)})
            searched = best_ms(board._searched_rows, args.repeat, wanted)
            hashed = best_ms(board._hashed_rows, args.repeat, wanted)
            both = board._searched_rows(wanted).tolist()
            assert both == board._hashed_rows(wanted).tolist()
            print(f"{len(wanted)} players: searched {searched} ms, hashed {hashed} ms")


if __name__ == "__main__":
    main()
