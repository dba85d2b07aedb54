"""Redis bytes of the changed-sets per changed player per board (issue 11 item 4).

Small and self-contained (no Spark, no API process): a real redis-server in a temp
dir, N players with one event each through ``SpeedLayer.apply`` (every event feeds
the default boards), a generation written from those totals with the production
segment writer (``serving.segments.write_board_segment``), ``speed.rebase.rebase``
onto it, then M more events for M distinct players (the changed players). Then,
per board, ``MEMORY USAGE <key> SAMPLES 0`` summed over the partitions:

* ``chz`` (live side) and ``chb`` (snapshot side, a bitmap over base rows);
* for comparison in the same run, the snapshot side as it was before (a lex zset of
  enc(base score)+playerId per changed player in the base, ``chs``), built under
  scratch keys of the same partitions and deleted again;
* a full Redis sorted set of the board (every live total, ZADD into one scratch
  key, then deleted), and the totals hash ``tot``: after the rebase it holds only
  the changed players (issue 11 item 1), ``unchanged_players_with_tot`` counts the
  others it still holds (0 expected).

Also ``INFO memory used_memory`` before and after the M events.

    .venv/bin/python -m bench.changed_sets --players 20000 --changed 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import redis

from bench.reads import make_raw
from serving.segments import board_entry, write_board_segment
from speed.partitions import KEY_PREFIX, Keys, encode_entry, tag

# The same events and player ids as bench/reads.py, so the two benches' boards agree.


async def apply_all(
    url: str, settings: Any, items: list[tuple[int, int]], round_tag: str
) -> dict[str, int]:
    import redis.asyncio as aioredis

    from conf.boards import load_boards
    from serving.registry import GenerationRegistry
    from speed.baserows import registry_lookup
    from speed.events import validate_event
    from speed.store import SpeedLayer

    boards = load_boards(settings.boards_file)
    client = aioredis.from_url(url, socket_timeout=300)
    speed = SpeedLayer(
        client, boards, settings.partitions, settings.retention_seconds, None
    )
    speed.base_generations = registry_lookup(
        GenerationRegistry(settings.segments_dir, settings.retained_generations)
    )
    now = datetime.now(UTC)
    statuses: dict[str, int] = {}
    try:
        for first in range(0, len(items), 1000):
            events = [
                validate_event(
                    make_raw(i, round_tag, first + j, pts),
                    settings,
                    boards,
                    now,
                    speed.rules,
                )
                for j, (i, pts) in enumerate(items[first : first + 1000])
            ]
            for outcome in await speed.apply(events):
                key = (
                    outcome.body["status"]
                    if outcome.body is not None
                    else type(outcome.error).__name__
                )
                statuses[key] = statuses.get(key, 0) + 1
    finally:
        await client.aclose()
    return statuses


def board_names(client: redis.Redis, partitions: int) -> list[str]:
    found: set[str] = set()
    for p in range(partitions):
        prefix = f"{KEY_PREFIX}:{tag(p)}:tot:"
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            found.add(key.decode()[len(prefix) :])
    return sorted(found)


def live_state(
    client: redis.Redis, partitions: int, board: str, segment: Any = None
) -> dict[str, tuple[int, int]]:
    """(total, version) per player: the base ``segment``'s (players without state in
    Redis are unchanged since it), overlaid with the totals hashes."""
    state: dict[str, tuple[int, int]] = {}
    if segment is not None:
        for row in range(segment.population):
            state[segment.players.str_at(row)] = (
                int(segment.scores[row]),
                int(segment.versions[row]),
            )
    for p in range(partitions):
        for player, value in client.hgetall(Keys(p).totals(board)).items():
            total, version = value.split(b"|")[:2]
            state[player.decode()] = (int(total), int(version))
    return state


def live_totals(
    client: redis.Redis, partitions: int, board: str, segment: Any = None
) -> dict[str, int]:
    return {
        p: t for p, (t, _) in live_state(client, partitions, board, segment).items()
    }


def publish(
    client: redis.Redis, settings: Any, boards: list[str], number: int
) -> dict[str, int]:
    """Generation ``number`` from the live totals (every board here is a plain
    player_id-tie board: no first_achieved season in the default config's boards
    at OCCURRED_AT is measured differently from the others)."""
    from conf.boards import board_order, load_boards

    config = load_boards(settings.boards_file)
    directory = settings.segments_dir / f"g{number}"
    directory.mkdir(parents=True)
    boundary = {
        str(p): int(client.get(Keys(p).position) or 0)
        for p in range(settings.partitions)
    }
    meta: dict[str, Any] = {}
    for board in boards:
        timed, _ = board_order(config, board)
        if timed:
            continue  # not measured here (members carry the time; same structure)
        state = live_state(client, settings.partitions, board)
        ordered = sorted(state.items(), key=lambda kv: (-kv[1][0], kv[0].encode()))
        # With each pair's version, as the publish writes it (jobs/versions.py): the
        # rebase then drops the totals of players unchanged since the boundary.
        sums = write_board_segment(
            directory,
            board,
            pa.array([p for p, _ in ordered], pa.string()),
            pa.array([s for _, (s, _) in ordered], pa.int64()),
            100,
            versions=pa.array([v for _, (_, v) in ordered], pa.int64()),
        )
        meta[board] = board_entry(board, len(ordered), sums)
        meta[board].pop("checksums")
    manifest = {
        "generation": f"g{number}",
        "publishedAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "boundary": boundary,
        "complete": True,
        "boards": meta,
    }
    (directory / "manifest.json").write_bytes(orjson.dumps(manifest))
    for p in range(settings.partitions):
        client.set(Keys(p).landed, boundary[str(p)])
    return boundary


def measure(
    client: redis.Redis, settings: Any, board: str, generation: Any
) -> dict[str, Any]:
    def usage(key: str) -> int:
        return int(client.memory_usage(key, samples=0) or 0)  # type: ignore[arg-type]

    segment = generation.board(board)
    chz = chb = tot = chs_old = changed = in_base = entries = 0
    unchanged_with_tot = 0
    for p in range(settings.partitions):
        keys = Keys(p)
        chz += usage(keys.changed_live(board))
        # With its per-block counts (lib/changed_counts.lua): same side.
        chb += usage(keys.changed_snapshot(board)) + usage(keys.changed_counts(board))
        tot += usage(keys.totals(board))
        entries += int(client.hlen(keys.totals(board)))
        members = client.zrange(keys.changed_live(board), 0, -1)
        changed += len(members)
        # Players with a total in Redis that are not changed since the base: none
        # when only deltas are kept.
        held = {k.decode() for k in client.hkeys(keys.totals(board))}
        unchanged_with_tot += len(held - {m[8:].decode() for m in members})
        # The snapshot side as it was before (chs): enc(base)+id per changed player
        # in the base, under a scratch key of the same partition.
        scratch = f"{keys.base}:bench-chs:{board}"
        old = {}
        for member in members:
            player = member[8:].decode()
            row = segment.row_of(player) if segment is not None else None
            if row is not None:
                old[encode_entry(int(segment.scores[row]), player)] = 0
        in_base += len(old)
        items = list(old.items())
        for first in range(0, len(items), 1000):
            client.zadd(scratch, dict(items[first : first + 1000]))
        chs_old += usage(scratch)
        client.delete(scratch)
    # A full sorted set of the same board: every live total, one key.
    full_key = f"{KEY_PREFIX}:bench-full:{board}"
    totals = live_totals(client, settings.partitions, board, segment)
    players = len(totals)
    items = list(totals.items())
    for first in range(0, len(items), 1000):
        client.zadd(full_key, dict(items[first : first + 1000]))
    full = usage(full_key)
    client.delete(full_key)
    per = max(1, changed)
    return {
        "board": board,
        "players": players,
        "changed_players": changed,
        "changed_in_base": in_base,
        "chz_bytes": chz,
        "chb_bytes": chb,
        "changed_sets_bytes_per_changed_player": round((chz + chb) / per, 1),
        "chz_bytes_per_changed_player": round(chz / per, 1),
        "chb_bytes_per_changed_player": round(chb / per, 1),
        "before_chz_plus_chs_bytes_per_changed_player": round((chz + chs_old) / per, 1),
        "before_chs_bytes_per_changed_in_base": round(chs_old / max(1, in_base), 1),
        "full_zset_bytes_per_player": round(full / max(1, len(totals)), 1),
        "tot_entries": entries,
        "unchanged_players_with_tot": unchanged_with_tot,
        "tot_bytes_per_player": round(tot / max(1, players), 1),
        "tot_bytes_per_changed_player": round(tot / per, 1),
        "tot_bytes_per_unchanged_player": round(
            0 if unchanged_with_tot == 0 else tot / max(1, entries), 1
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=20000)
    parser.add_argument("--changed", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from conf.settings import Settings
    from serving.registry import GenerationRegistry
    from speed.rebase import rebase
    from speed.server import RedisServer

    rng = random.Random(11)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="lb-bench-chsets-") as tmp:
        data = Path(tmp)
        server = RedisServer(data / "redis", appendfsync="everysec").start()
        try:
            os.environ["LB_DATA_DIR"] = str(data)
            settings = Settings(partitions=args.partitions, rate_limit="off")
            client = redis.Redis.from_url(server.url)
            started = time.time()
            first = [(i, 10 * rng.randrange(0, 101)) for i in range(args.players)]
            s1 = asyncio.run(apply_all(server.url, settings, first, "a"))
            boards = board_names(client, settings.partitions)
            publish(client, settings, boards, 1)
            registry = GenerationRegistry(
                settings.segments_dir, settings.retained_generations
            )
            registry.refresh(force=True)
            generation = registry.by_number(1)
            assert generation is not None
            report = rebase(client, generation, settings.partitions)
            before = int(client.info("memory")["used_memory"])
            changed = rng.sample(range(args.players), args.changed)
            second = [(i, 10 * rng.randrange(1, 101)) for i in changed]
            s2 = asyncio.run(apply_all(server.url, settings, second, "b"))
            after = int(client.info("memory")["used_memory"])
            mx_keys = sum(1 for _ in client.scan_iter(match="lb:*:mx:*", count=1000))
            results = [
                measure(client, settings, board, generation)
                for board in generation.board_names()
            ]
            out = {
                "command": "python -m bench.changed_sets "
                + " ".join(argv if argv is not None else os.sys.argv[1:]),  # type: ignore[attr-defined]
                "commit": commit,
                "started": datetime.fromtimestamp(started, UTC).isoformat(),
                "load_average": os.getloadavg(),
                "players": args.players,
                "changed": args.changed,
                "partitions": args.partitions,
                "statuses": {"first": s1, "second": s2},
                "rebase": {str(k): v for k, v in report.partitions.items()},
                "used_memory_delta_per_changed_event": round(
                    (after - before) / max(1, args.changed), 1
                ),
                "best_of_keys": mx_keys,
                "used_memory_after_rebase": before,
                "boards": results,
            }
            client.close()
        finally:
            server.stop()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
