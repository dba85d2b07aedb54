"""Records leave Redis once landed (issue 25 item 1): what they cost before and after.

    python -m bench.landed_records [--events 20000] [--index 2000000]

Starts its own Redis (AOF ``appendfsync always``), applies events straight through
``SpeedLayer.apply`` in batches of 1000 and reports the dedupe and contribution
records' bytes per event (``MEMORY USAGE`` of every record bucket); then publishes
a generation holding only the landed records index of those events (built from the
log records as the publish builds it from bronze: speed/records.py
``landed_entries``, no segments), rebases onto it and reports the bytes again. Last,
the API's lookup in the index: CPU per event of ``SpeedLayer._landed`` for chunks
of 1000 events, against this index and one of ``--index`` random entries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import redis

from bench.capacity import _apply, _events
from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from serving.landed import (
    CONTRIBUTION,
    DEDUPE,
    Entry,
    LandedIndex,
    layer_file,
    manifest_entry,
    write_layer,
)
from serving.manifest import MANIFEST_FILE, build_manifest
from serving.registry import GenerationRegistry
from speed.connection import sync_client
from speed.events import validate_event
from speed.partitions import Keys
from speed.rebase import rebase
from speed.records import identity_parts, landed_entries
from speed.server import RedisServer
from speed.store import SpeedLayer, _Call

# A typical record value's size (bench/RESULTS.md: ~60-80 B per record in Redis).
VALUE = b"x" * 40


def record_bytes(client: redis.Redis) -> tuple[int, int]:
    """(bytes, records) of every dedupe and contribution record bucket."""
    size = records = 0
    for pattern in ("lb:*:rd:*", "lb:*:rc:*"):
        for key in client.scan_iter(match=pattern, count=1000):
            size += int(client.memory_usage(key, samples=0) or 0)
            records += int(client.hlen(key))
    return size, records


def base_bytes(client: redis.Redis, partitions: int) -> int:
    return sum(
        int(client.memory_usage(Keys(p).base_generation, samples=0) or 0)
        for p in range(partitions)
    )


def publish_index(client: redis.Redis, segments: Path, partitions: int) -> Path:
    """A generation g1 whose boundary is every position handed out and whose only
    content is the landed records index of the log (no boards)."""
    entries: list[Entry] = []
    boundary = {}
    for p in range(partitions):
        log: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
            Keys(p).log
        )
        boundary[p] = int(client.get(Keys(p).position) or 0)
        for _, fields in log:
            entries += [Entry(*e) for e in landed_entries(orjson.loads(fields[b"r"]))]
    directory = segments / "g1"
    directory.mkdir(parents=True)
    _, count = write_layer(directory / layer_file("g1"), entries)
    text = build_manifest(
        "g1",
        datetime.now(UTC),
        boundary,
        {},
        landed=manifest_entry([layer_file("g1")], count),
    )
    (directory / MANIFEST_FILE).write_text(text)
    for p in range(partitions):
        client.set(Keys(p).landed, boundary[p])
    return directory


class _Mapped:
    """Stands for a generation whose index is ``index`` (what _landed reads)."""

    def __init__(self, index: LandedIndex) -> None:
        self.index = index

    def landed(self) -> LandedIndex:
        return self.index


def lookup_cpu(generation: Any, calls: list[_Call], rounds: int) -> tuple[float, float]:
    """(µs CPU per event, p99 ms of one 1000-event chunk's lookup) of the index
    lookup alone: the identity hashes are computed by the write path anyway (its
    Redis fields), from the same hash (speed/records.py identity_parts)."""
    hashes = [
        (
            identity_parts(c.event.identity, c.event.event.eventId),
            identity_parts(c.event.identity, c.event.event.matchId),
        )
        for c in calls
    ]
    chunks = [hashes[i : i + 1000] for i in range(0, len(hashes), 1000)]
    times = []
    started = time.process_time()
    for _ in range(rounds):
        for chunk in chunks:
            t = time.perf_counter()
            SpeedLayer._landed(generation, chunk)
            times.append(time.perf_counter() - t)
    cpu = time.process_time() - started
    times.sort()
    return cpu / (rounds * len(calls)) * 1e6, times[int(0.99 * (len(times) - 1))] * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=5000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--index", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    settings = Settings(rate_limit="off")
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = RedisServer(root / "redis", appendfsync="always").start()
        try:
            client = sync_client(server.url)
            raws = _events(args.players, args.events, args.seed)
            accepted, _, _ = asyncio.run(_apply(server.url, raws))
            size, records = record_bytes(client)
            out["events"] = accepted
            out["records"] = records
            out["bytes_per_event_before"] = round(size / accepted, 1)
            base_before = base_bytes(client, settings.partitions)
            publish_index(client, root / "segments", settings.partitions)
            registry = GenerationRegistry(root / "segments", 3)
            registry.refresh(force=True)
            generation = registry.by_number(1)
            assert generation is not None and generation.landed() is not None
            report = rebase(
                client,
                generation,
                settings.partitions,
                lifetime_seconds=settings.record_ttl_seconds,
            )
            out["rebase"] = sorted(set(report.partitions.values()))
            size, records = record_bytes(client)
            out["records_after"] = records
            out["bytes_per_event_after"] = round(size / accepted, 2)
            out["base_hash_bytes_delta_per_event"] = round(
                (base_bytes(client, settings.partitions) - base_before) / accepted, 3
            )
            out["index_entries"] = generation.landed().entries  # type: ignore[union-attr]
            out["index_file_bytes_per_event"] = round(
                (generation.directory / layer_file("g1")).stat().st_size / accepted, 1
            )
            # The lookup the API does per chunk (no Redis involved).
            boards = load_boards(settings.boards_file)
            now = datetime.now(UTC)
            rules = default_registry()
            probe = [validate_event(r, settings, boards, now, rules) for r in raws]
            calls = [_Call(e, 0, []) for e in probe]
            cpu, p99 = lookup_cpu(generation, calls, 5)
            out["lookup_us_per_event_small_index"] = round(cpu, 2)
            out["lookup_chunk_p99_ms_small_index"] = round(p99, 3)
        finally:
            server.stop()
        # A big index: --index random entries per kind in one layer, then in 8.
        rng = random.Random(args.seed)
        big = root / "big"
        big.mkdir()
        for layers in (1, 8):
            names = []
            per = args.index // layers
            for i in range(layers):
                name = f"l{layers}-{i}"
                write_layer(
                    big / name,
                    [
                        Entry(
                            kind, rng.getrandbits(64), rng.getrandbits(16), 0, b"x" * 40
                        )
                        for kind in (DEDUPE, CONTRIBUTION)
                        for _ in range(per)
                    ],
                )
                names.append(name)
            cpu, p99 = lookup_cpu(_Mapped(LandedIndex(big, names)), calls, 5)
            out[f"lookup_us_per_event_{args.index}_entries_{layers}_layers"] = round(
                cpu, 2
            )
            out[f"lookup_chunk_p99_ms_{args.index}_entries_{layers}_layers"] = round(
                p99, 3
            )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
