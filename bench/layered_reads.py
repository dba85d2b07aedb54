"""CPU of one read on a layered segment against the compacted segment of the same
rows, in process, alternated (issue 24's read target, without the HTTP stack).

    python -m bench.layered_reads [--players N] [--layers K] [--layer-players L]
                                  [--probes P] [--rounds R] [--out FILE]

Set-up (not measured): a base segment of N players (``serving.segments``' writer,
scores on a coarse scale, so with ties), then K layers of L distinct changed
players each (``serving.layers.write_board_layer``, raised scores, new versions),
and the compacted segment of the final rows, written as a full segment. The
flatten of the chain (what every API worker does once per board and generation,
``LayeredSegment``) is timed.

Measured: per kind of read (the segment calls a snapshot read makes, and the
building blocks live reads use), P probe players, each kind on the compacted and
on the layered segment in turn, R rounds, thread CPU per call; the minimum over
rounds (the steadiest figure on a shared machine) and the added CPU of the layered
read in µs. Both segments must answer the same (checked on every probe). The HTTP
side of the same reads is ``bench.reads --layers K --compare-compacted``; a read
through the API costs 150-400 µs of CPU there, against which the added µs here
are the part that layering changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness import loadavg
from serving.layers import Layer, LayeredSegment, write_board_layer
from serving.segments import BoardSegment, board_entry, write_board_segment

BOARD = "all-time:global"
RESULTS = Path(__file__).resolve().parent / "results"


def write_full(
    directory: Path, players: list[str], scores: np.ndarray, versions: np.ndarray
) -> BoardSegment:
    """A full segment of these rows, in display order (score desc, id asc)."""
    ids = np.array(players, dtype=object)
    order = sorted(range(len(players)), key=lambda i: (-int(scores[i]), ids[i]))
    sums = write_board_segment(
        directory,
        BOARD,
        pa.array([players[i] for i in order], pa.string()),
        pa.array(scores[order], pa.int64()),
        4096,
        None,
        pa.array(versions[order], pa.int64()),
    )
    return BoardSegment.load(directory, BOARD, board_entry(BOARD, len(order), sums))


def reads() -> dict[str, Callable[[BoardSegment, str], Any]]:
    """The segment calls of each read, as api/reads/snapshot.py and speed/live.py
    make them."""

    def rank(segment: BoardSegment, player: str) -> Any:
        row = segment.row_of(player)
        return segment.entry(row) if row is not None else None

    def nearby5(segment: BoardSegment, player: str) -> Any:
        row = segment.row_of(player)
        assert row is not None
        return segment.entry(row), segment.entries(max(0, row - 5), row + 6)

    def dense_counts(segment: BoardSegment, player: str) -> Any:
        row = segment.row_of(player)
        assert row is not None
        score = int(segment.scores[row])
        return segment.count_above(score), segment.distinct_above(score)

    def live_window(segment: BoardSegment, player: str) -> Any:
        # A live nearby's base window: 21 rows either side, scores sliced.
        row = segment.row_of(player)
        assert row is not None
        lo = max(0, row - 21)
        return list(segment.scores[lo : row + 22]), segment.first_row_after(
            int(segment.scores[row]), player
        )

    return {
        "row_of": lambda s, p: s.row_of(p),
        "rank": rank,
        "nearby5": nearby5,
        "dense_counts": dense_counts,
        "live_window": live_window,
        "top100": lambda s, p: s.entries(0, 100),
    }


def cpu_per_call(
    fn: Callable[[BoardSegment, str], Any], segment: BoardSegment, probes: list[str]
) -> float:
    started = time.thread_time()
    for player in probes:
        fn(segment, player)
    return 1e6 * (time.thread_time() - started) / len(probes)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    players = [f"player-{i:07d}" for i in range(args.players)]
    scores = rng.integers(0, 20_000, args.players) * 5
    versions = np.ones(args.players, np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "base").mkdir()
        base = write_full(root / "base", players, scores, versions)
        layers = []
        for k in range(args.layers):
            directory = root / f"g{k + 2}"
            directory.mkdir()
            rows = []
            for i in rng.choice(args.players, args.layer_players, replace=False):
                scores[i] += int(rng.integers(1, 100)) * 5
                versions[i] += 1
                rows.append((players[i], int(scores[i]), None, int(versions[i])))
            entry = write_board_layer(directory, BOARD, f"g{k + 2}", rows, set())
            layers.append(Layer.load(directory, entry))
        started = time.thread_time()
        layered = LayeredSegment(base, layers)
        flatten_ms = 1e3 * (time.thread_time() - started)
        (root / "compacted").mkdir()
        compacted = write_full(root / "compacted", players, scores, versions)
        probes = [players[i] for i in rng.choice(args.players, args.probes)]
        results: dict[str, Any] = {}
        for name, fn in reads().items():
            for player in probes:
                assert fn(layered, player) == fn(compacted, player), (name, player)
            rounds: dict[str, list[float]] = {"compacted": [], "layered": []}
            for _ in range(args.rounds):
                for label, segment in (("compacted", compacted), ("layered", layered)):
                    rounds[label].append(cpu_per_call(fn, segment, probes))
            c, lay = min(rounds["compacted"]), min(rounds["layered"])
            results[name] = {
                "compacted_us": round(c, 1),
                "layered_us": round(lay, 1),
                "ratio": round(lay / c, 2),
                "added_us": round(lay - c, 1),
                "rounds": rounds,
            }
    return {
        "benchmark": "layered_reads",
        "args": vars(args) | {"out": str(args.out)},
        "load_before": args.load_before,
        "layer_rows": layered.layer_rows,
        "flatten_ms": round(flatten_ms, 1),
        "reads": results,
        "load_after": loadavg(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=200_000)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--layer-players", type=int, default=10_000)
    p.add_argument("--probes", type=int, default=2_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.load_before = loadavg()
    report = run(args)
    print(
        f"{args.players:,} players, {args.layers} layers of {args.layer_players:,} "
        f"({report['layer_rows']:,} delta rows); flatten {report['flatten_ms']} ms "
        f"of CPU; load {args.load_before} -> {report['load_after']}"
    )
    print(f"{'read':14s} {'compacted us':>13s} {'layered us':>11s} {'ratio':>6s} added")
    for name, r in report["reads"].items():
        print(
            f"{name:14s} {r['compacted_us']:13.1f} {r['layered_us']:11.1f} "
            f"{r['ratio']:6.2f} {r['added_us']:+.1f}"
        )
    out = args.out or RESULTS / time.strftime("layered-reads-%Y%m%dT%H%M%SZ.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
