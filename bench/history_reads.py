"""CPU per history and diff read (API.md "Why a rank changed"), in process, over two
generations of a large board: the yardstick for issue 27 (read p99 within 10 ms at
1,000 req/s).

    python -m bench.history_reads [--players N] [--extra-events M] [--data DIR]
                                  [--reads K] [--profile]
    python -m bench.history_reads --data DIR --compare OLD_ROOT [--rounds R]

Set-up (not timed): generations g1 and g2 of ``season:BENCH:global`` written with
the production writer (``serving.segments.write_segments`` + ``build_manifest``),
as bench/reads.py's direct publish does: g1 gives each of N players a random
multiple of 10 in [0, 1000] (many ties), g2 adds one more such event to M distinct
players. Kept in ``--data`` (reused when it already holds them). Each player's g1
event and each g2 event is a log record (8 partitions, positions in player order):
every generation has its contributions index (``serving.contributions.write_index``,
g2's layered over g1's) and ``data/delta/bronze_events`` holds the records (written
with ``deltalake``, as landing leaves them), so code that read contributions from
bronze (before the index) and code that reads the index list the same ones.

Measured, in one process, against ``api.history.HistoryService`` (what the route
calls; the HTTP and auth layers are not in it):

* history: the first read (builds what a pair of generations needs), then K reads
  of K distinct random players (each a miss of the answer cache), process CPU per
  read; every answer is checked against an offline sort of the two generations;
* diff g1 -> g2: the first read of the pair (limit 20; after the history reads,
  so this tree's code finds the pair's arrays built), then reads with other
  limits, CPU per read, and (this tree's code) the first diff of a fresh service,
  which builds everything; checked against an offline diff;
* memory: the process's anonymous resident memory (``RssAnon``: what it allocated,
  not the mapped segment files' pages) before the first read and after each of
  them (the extra resident memory of one cached generation pair), and the bytes
  of the arrays the service keeps (this tree's code only).

``--compare OLD_ROOT`` runs the measurement ``--rounds`` times in child processes,
alternating ``PYTHONPATH=OLD_ROOT`` (e.g. a detached worktree of main) with this
tree, so old and new code are measured on the same data at the same load. Prints
one JSON object per child and a summary.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

BOARD = "season:BENCH:global"
HERE = Path(__file__).resolve().parent.parent


def player_id(i: int) -> str:
    return f"p{i:07d}"  # zero-padded: byte order of ids = numeric order


def rss_mb(field: str = "RssAnon") -> float:
    """The process's resident memory of one kind (MB): ``RssAnon`` is what it
    allocated (the arrays it keeps), ``RssFile`` the mapped files' pages."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def kept_mb(service: Any) -> dict[str, float] | None:
    """The bytes of the arrays the history service keeps (this tree's
    serving/history.py; None for code without them)."""
    pairs = getattr(service, "_pairs", None)
    boards = getattr(pairs, "_boards", None)
    if boards is None:
        return None
    out = {}
    for name in ("_boards", "_indexes", "_diffs"):
        total = 0
        for _, value in getattr(pairs, name)._items.values():
            for item in vars(value).values() if hasattr(value, "__dict__") else []:
                total += getattr(item, "nbytes", 0)
            for slot in getattr(value, "__slots__", ()):
                total += getattr(getattr(value, slot), "nbytes", 0)
        out[name.strip("_")] = round(total / 2**20, 1)
    return out


def points_of(players: int, extra: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    g1 = rng.integers(0, 101, players, dtype=np.int64) * 10
    g2 = g1.copy()
    changed = rng.choice(players, size=min(extra, players), replace=False)
    g2[changed] += rng.integers(1, 101, len(changed), dtype=np.int64) * 10
    return g1, g2


PARTITIONS = 8
OCCURRED_AT = "2026-11-20T10:00:00Z"


def log_records(players: int, extra: int, seed: int) -> list[tuple[Any, Any, Any]]:
    """Per generation: its applied items (``serving.contributions.ITEM_SCHEMA``),
    its boundary and its bronze rows (partition, position, player_id, raw): g1 one
    event per player (its g1 points), g2 one per changed player (the points added,
    so each total is the generation's)."""
    import orjson
    import pyarrow as pa

    from serving.contributions import ITEM_SCHEMA
    from speed.partitions import partition_of

    g1, g2 = points_of(players, extra, seed)
    part = np.array([partition_of(player_id(i), PARTITIONS) for i in range(players)])
    positions = np.zeros(PARTITIONS, np.int64)
    out = []
    for number, who in enumerate((np.arange(players), np.flatnonzero(g2 != g1)), 1):
        points = g1 if number == 1 else g2
        pos = np.empty(len(who), np.int64)
        for k, i in enumerate(who.tolist()):
            positions[part[i]] += 1
            pos[k] = positions[part[i]]
        pids = [player_id(i) for i in who.tolist()]
        events = [f"g{number}-e{i}" for i in who.tolist()]
        matches = [f"g{number}-m{i}" for i in who.tolist()]
        totals = points[who]
        items = pa.table(
            [
                pa.array([BOARD] * len(who), pa.string()),
                pa.array(pids, pa.string()),
                pa.array(part[who], pa.int32()),
                pa.array(pos, pa.int64()),
                pa.array(events, pa.string()),
                pa.array(matches, pa.string()),
                pa.array(["result"] * len(who), pa.string()),
                pa.array([OCCURRED_AT] * len(who), pa.string()),
                pa.array(totals, pa.int64()),
            ],
            schema=ITEM_SCHEMA,
        )
        raw = [
            orjson.dumps(
                {
                    "partition": int(part[i]),
                    "position": int(pos[k]),
                    "status": "accepted",
                    "event": {
                        "eventId": events[k],
                        "playerId": pids[k],
                        "matchId": matches[k],
                        "kind": "result",
                        "occurredAt": OCCURRED_AT,
                    },
                    "result": {
                        "status": "accepted",
                        "boards": [{"board": BOARD, "total": int(totals[k])}],
                    },
                }
            ).decode()
            for k, i in enumerate(who.tolist())
        ]
        bronze = pa.table(
            {
                "partition": pa.array(part[who], pa.int32()),
                "position": pa.array(pos, pa.int64()),
                "player_id": pa.array(pids, pa.string()),
                "raw": pa.array(raw, pa.string()),
            }
        )
        boundary = {p: int(positions[p]) for p in range(PARTITIONS)}
        out.append((items, boundary, bronze))
    return out


def build(data: Path, players: int, extra: int, seed: int) -> None:
    """g1 and g2 under ``data/segments`` (skipped when both are there)."""
    import pyarrow as pa

    from serving.contributions import write_index
    from serving.manifest import MANIFEST_FILE, build_manifest, generation_id
    from serving.segments import write_segments

    segments = data / "segments"
    if all((segments / g / MANIFEST_FILE).exists() for g in ("g1", "g2")):
        return
    ids = pa.array([player_id(i) for i in range(players)], pa.string())
    logs = log_records(players, extra, seed)
    rows: list[pa.Table] = []
    for number, points in enumerate(points_of(players, extra, seed), start=1):
        order = np.lexsort((np.arange(players), -points))  # score desc, id asc
        table = pa.table(
            {
                "board": pa.array(np.full(players, BOARD, dtype=object), pa.string()),
                "player_id": ids.take(pa.array(order)),
                "score": pa.array(points[order], pa.int64()),
            }
        )
        directory = segments / generation_id(number)
        directory.mkdir(parents=True, exist_ok=True)
        files = write_segments(table, directory, 1000)
        items, boundary, bronze = logs[number - 1]
        rows.append(bronze)
        parent = segments / f"g{number - 1}"
        contributions = write_index(
            directory,
            generation_id(number),
            items,
            (parent, json.loads((parent / MANIFEST_FILE).read_text()))
            if number > 1
            else None,
        )
        manifest = build_manifest(
            generation_id(number),
            datetime.now(UTC),
            boundary,
            files,
            contributions=contributions,
        )
        (directory / MANIFEST_FILE).write_text(manifest)
    from deltalake import write_deltalake

    write_deltalake(
        str(data / "delta" / "bronze_events"),
        pa.concat_tables(rows),
        partition_by=["partition"],
        mode="overwrite",
    )
    (data / "params.json").write_text(
        json.dumps({"players": players, "extra": extra, "seed": seed})
    )


class Oracle:
    """Offline sorts of the two generations' points."""

    def __init__(self, g1: np.ndarray, g2: np.ndarray) -> None:
        self.g = (g1, g2)
        self.asc = (np.sort(g1), np.sort(g2))
        self.n = len(g1)

    def ranks(self, k: int) -> np.ndarray:
        return self.n - np.searchsorted(self.asc[k], self.g[k], side="right") + 1

    def history(self, i: int) -> list[tuple[Any, ...]]:
        g1, g2 = self.g
        r = [
            int(self.n - np.searchsorted(a, g[i], side="right") + 1)
            for a, g in zip(self.asc, self.g, strict=True)
        ]
        above1, above2 = g1 > g1[i], g2 > g2[i]
        change = {
            "from": r[0],
            "to": r[1],
            "ownScoreChange": int(g2[i] - g1[i]),
            "newlyAbove": int(np.count_nonzero(above2 & ~above1)),
            "noLongerAbove": int(np.count_nonzero(above1 & ~above2)),
        }
        return [("g2", int(g2[i]), r[1], change), ("g1", int(g1[i]), r[0], None)]

    def diff(self, limit: int) -> dict[str, Any]:
        r1, r2 = self.ranks(0), self.ranks(1)
        moved = np.flatnonzero(r1 != r2)
        size = np.abs(r1[moved] - r2[moved])
        order = moved[np.lexsort((moved, -size))][:limit]
        return {
            "movers": [
                {
                    "playerId": player_id(int(i)),
                    "fromRank": int(r1[i]),
                    "toRank": int(r2[i]),
                    "fromScore": int(self.g[0][i]),
                    "toScore": int(self.g[1][i]),
                }
                for i in order
            ],
            "entered": [],
            "left": [],
            "counts": {"movers": len(moved), "entered": 0, "left": 0},
        }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import orjson

    import serving.history
    from api.history import HistoryService
    from bench.harness import bench_boards
    from serving.registry import GenerationRegistry

    data = Path(args.data)
    params = json.loads((data / "params.json").read_text())
    oracle = Oracle(*points_of(params["players"], params["extra"], params["seed"]))
    config = bench_boards()
    registry = GenerationRegistry(data / "segments", retained=10)
    service = HistoryService(lambda: config, registry, data, partitions=PARTITIONS)
    out: dict[str, Any] = {
        "code": str(Path(serving.history.__file__).resolve().parent.parent),
        "players": params["players"],
        "loadavg": list(os.getloadavg()),
    }
    rss0 = rss_mb()
    # Map both generations' segments first (not what is measured).
    for g in ("g1", "g2"):
        board = registry.get(g).board(BOARD)
        assert board is not None
        board.scores.sum()
    rss_mapped = rss_mb()
    rng = random.Random(args.seed)
    picks = rng.sample(range(params["players"]), args.reads + 1)
    bad: list[str] = []

    def check_history(i: int, body: bytes) -> None:
        got = [
            (e["generation"]["id"], e["score"], e["rank"], e["rankChange"])
            for e in orjson.loads(body)["entries"]
        ]
        if got != oracle.history(i) and len(bad) < 5:
            bad.append(f"history {player_id(i)}: {got} != {oracle.history(i)}")

    t0, c0 = time.perf_counter(), time.process_time()
    first = service.history(BOARD, player_id(picks[0]), 10)
    out["history_first_ms"] = {
        "wall": round((time.perf_counter() - t0) * 1e3, 2),
        "cpu": round((time.process_time() - c0) * 1e3, 2),
    }
    check_history(picks[0], first.body)
    out["rss_after_first_history_mb"] = round(rss_mb() - rss_mapped, 1)
    out["kept_after_first_history_mb"] = kept_mb(service)
    profiler = cProfile.Profile() if args.profile else None
    answers = []
    c0 = time.process_time()
    if profiler:
        profiler.enable()
    for i in picks[1:]:
        answers.append(service.history(BOARD, player_id(i), 10).body)
    if profiler:
        profiler.disable()
    cpu = time.process_time() - c0
    out["history_warm_cpu_ms_per_read"] = round(cpu / args.reads * 1e3, 4)
    for i, body in zip(picks[1:], answers, strict=True):
        check_history(i, body)

    want = oracle.diff(20)
    t0, c0 = time.perf_counter(), time.process_time()
    body = orjson.loads(service.diff(BOARD, "g1", "g2", 20).body)
    out["diff_first_ms"] = {
        "wall": round((time.perf_counter() - t0) * 1e3, 1),
        "cpu": round((time.process_time() - c0) * 1e3, 1),
    }
    if {k: body[k] for k in want} != want:
        bad.append(f"diff 20: counts {body['counts']} != {want['counts']}")
    out["rss_after_first_diff_mb"] = round(rss_mb() - rss_mapped, 1)
    out["kept_after_first_diff_mb"] = kept_mb(service)
    limits = [lim for lim in range(1, 1001) if lim != 20][: args.diffs]
    c0 = time.process_time()
    diffs = [service.diff(BOARD, "g1", "g2", lim).body for lim in limits]
    cpu = time.process_time() - c0
    out["diff_warm_cpu_ms_per_read"] = round(cpu / len(limits) * 1e3, 3)
    full = oracle.diff(max(limits))
    for lim, got in zip(limits, diffs, strict=True):
        decoded = orjson.loads(got)
        expect = {**full, "movers": full["movers"][:lim]}
        if {k: decoded[k] for k in expect} != expect and len(bad) < 5:
            bad.append(f"diff {lim} differs")
    out["rss_anon_mapped_mb"] = round(rss_mapped - rss0, 1)
    out["rss_anon_total_mb"] = round(rss_mb(), 1)
    out["rss_file_total_mb"] = round(rss_mb("RssFile"), 1)
    if hasattr(getattr(service, "_pairs", None), "diff"):
        # This tree's diff shares the pair's arrays with history reads: the first
        # diff of a fresh service builds them all (the old code's first diff
        # above is already that).
        fresh = HistoryService(lambda: config, registry, data, partitions=PARTITIONS)
        t0, c0 = time.perf_counter(), time.process_time()
        cold = orjson.loads(fresh.diff(BOARD, "g1", "g2", 20).body)
        out["diff_cold_ms"] = {
            "wall": round((time.perf_counter() - t0) * 1e3, 1),
            "cpu": round((time.process_time() - c0) * 1e3, 1),
        }
        if {k: cold[k] for k in want} != want:
            bad.append("cold diff 20 differs")
        del fresh
    out["checked"] = {"history": len(picks), "diff": len(limits) + 2, "bad": bad}
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        out["profile"] = text.getvalue()
    return out


def compare(args: argparse.Namespace) -> int:
    roots = {"old": str(Path(args.compare).resolve()), "new": str(HERE)}
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for name, root in roots.items():
            env = {**os.environ, "PYTHONPATH": root}
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--data",
                args.data,
                "--reads",
                str(args.reads),
                "--diffs",
                str(args.diffs if name == "new" else args.old_diffs),
                "--seed",
                str(args.seed),
            ]
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                print(done.stdout, done.stderr, file=sys.stderr)
                return 1
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result["loadavg_after"] = list(os.getloadavg())
            result["run"] = name
            print(json.dumps(result), flush=True)
            runs[name].append(result)
    summary = {
        name: {
            key: [r.get(key) for r in results]
            for key in (
                "history_warm_cpu_ms_per_read",
                "history_first_ms",
                "diff_first_ms",
                "diff_warm_cpu_ms_per_read",
                "diff_cold_ms",
                "rss_after_first_history_mb",
                "rss_after_first_diff_mb",
                "kept_after_first_diff_mb",
            )
        }
        for name, results in runs.items()
    }
    print(json.dumps({"summary": summary}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--players", type=int, default=1_000_000)
    p.add_argument("--extra-events", type=int, default=20_000)
    p.add_argument("--data", default="/tmp/lb-history-bench")
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--diffs", type=int, default=200)
    p.add_argument("--old-diffs", type=int, default=1, help="--compare: old code")
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--compare", help="the other code root (PYTHONPATH) to alternate")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    build(Path(args.data), args.players, args.extra_events, args.seed)
    if args.compare:
        return compare(args)
    result = measure(args)
    profile = result.pop("profile", None)
    if profile:
        print(profile, file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
