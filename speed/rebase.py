"""Rebase the speed layer onto a newly published generation.

For each partition: stage the generation's bucket boundaries and this partition's
per-bucket counts, then run ``rebase_partition.lua``, which atomically keeps in the
changed-sets only the players changed after the generation's boundary and swaps in the
rebuilt Fenwick trees. Redis memory then follows the players changed since the last
generation, not the size of the boards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import redis

from conf.rule_state import load_rule_state
from conf.settings import Settings
from serving.log_records import board_items
from serving.registry import Generation, GenerationRegistry
from serving.segments import BoardSegment
from speed.baserows import base_row, crc32_column, partition_rows
from speed.connection import sync_client
from speed.partitions import KEY_PREFIX, Keys, tag
from speed.records import BUCKET_BITS, parse_epochs, slice_of
from speed.scripts import REBASE_PARTITION, register
from speed.server import resolve_redis_url

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 20


@dataclass
class RebaseReport:
    generation: str
    partitions: dict[int, str]


# Buckets above the generation's highest score: players who climb past it would
# otherwise all share its top bucket, and its population is the error bound.
HEADROOM_LINEAR = 32
HEADROOM_DOUBLING = 16


def bucket_lowers(segment: BoardSegment) -> np.ndarray:
    """The generation's equi-depth lower bounds plus empty headroom buckets above its
    highest score: 32 at the mean bucket width, then 16 of doubling width."""
    lowers = segment.bucket_lowers
    if len(lowers) == 0:
        return lowers
    top = int(lowers[-1])
    step = max(1, (top - int(lowers[0])) // max(1, len(lowers) - 1))
    extra = [top + step * (i + 1) for i in range(HEADROOM_LINEAR)]
    width = step
    for _ in range(HEADROOM_DOUBLING):
        width *= 2
        extra.append(extra[-1] + width)
    return np.concatenate([lowers, np.array(extra, dtype=lowers.dtype)])


def partition_counts(segment: BoardSegment, partitions: int) -> np.ndarray:
    """Players per (partition, bucket) of one board: shape (partitions, buckets)."""
    lowers = bucket_lowers(segment)
    size = max(1, len(lowers))
    if segment.population == 0:
        return np.zeros((partitions, size), dtype=np.int64)
    if len(lowers):
        buckets = np.searchsorted(lowers, segment.scores, side="right") - 1
        buckets = np.clip(buckets, 0, size - 1)
    else:
        buckets = np.zeros(segment.population, dtype=np.int64)
    # crc32 of the UTF-8 id, as speed.partitions.partition_of does (vectorized).
    players = segment.players
    crc = crc32_column(players.offsets, players.data)
    owner = (crc % np.uint32(partitions)).astype(np.int64)
    flat = np.bincount(owner * size + buckets, minlength=partitions * size)
    return flat.reshape(partitions, size)


def _boards_with_changes(client: redis.Redis, partition: int) -> set[str]:
    prefix = f"{KEY_PREFIX}:{tag(partition)}:chz:"
    return {
        key.decode()[len(prefix) :]
        for key in client.scan_iter(match=f"{prefix}*", count=1000)
    }


def _tail_pairs(client: redis.Redis, keys: Keys, boundary: int) -> set[tuple[str, str]]:
    pairs: set[tuple[str, str]] = set()
    entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
        keys.log, min=f"{boundary + 1}-0", max="+"
    )
    for _, fields in entries:
        record = orjson.loads(fields[b"r"])
        for item in board_items(record.get("result") or {}):
            # Held for late review: the board did not change (and may be closed).
            if item.get("status", record.get("status")) == "late-review":
                continue
            pairs.add((item["board"], record["event"]["playerId"]))
    return pairs


def _droppable(
    client: redis.Redis,
    keys: Keys,
    generation: Generation,
    segments: dict[str, BoardSegment | None],
    partitions: int,
) -> dict[str, list[str]]:
    """Per board, the players with a total in Redis who are on the generation's
    segment, which carries their version: the script drops those not changed after
    the boundary (nor shadowed). Redis holds only what changed since the last
    generation, so this reads little once the first rebase has dropped the rest."""
    drop: dict[str, list[str]] = {}
    for board, segment in segments.items():
        if segment is None or segment.versions is None:
            continue  # a segment without versions: totals stay (they count on)
        rows = partition_rows(generation, board, partitions)
        assert rows is not None
        names = [
            p.decode() if isinstance(p, bytes) else p
            for p in client.hkeys(keys.totals(board))  # type: ignore[union-attr]
        ]
        found = rows.rows_of(names)
        listed = [name for name, row in zip(names, found, strict=True) if row >= 0]
        if listed:
            drop[board] = listed
    return drop


# "Never" as a record lifetime (rebase without one: epochs leave only once landed).
NEVER_SECONDS = 10**10


def delete_epochs(client: redis.Redis, keys: Keys, epochs: list[int]) -> None:
    """Delete the record buckets of epochs that left (rebase_partition.lua took
    them out of the live list, so nothing reads or writes them any more). One key
    per UNLINK: a cluster pipeline refuses multi-key commands."""
    if not epochs:
        return
    pipe = client.pipeline(transaction=False)
    for epoch in epochs:
        for bucket in range(1 << BUCKET_BITS):
            pipe.unlink(keys.dedupe_bucket(epoch, bucket))
            pipe.unlink(keys.contribution_bucket(epoch, bucket))
    pipe.execute()


def rebase(
    client: redis.Redis,
    generation: Generation,
    partitions: int,
    exclude: Collection[str] = (),
    lifetime_seconds: int | None = None,
    keep_records: bool = False,
) -> RebaseReport:
    """Rebase every partition onto ``generation``; idempotent (a partition already at
    or past it reports ``stale``). Boards in ``exclude`` (closed, final in this
    generation: ``speed/closed.py``) get no speed-layer state back.

    Each partition starts a new record epoch; when the generation has a landed
    records index, the epochs all landed in it leave Redis (speed/records.py),
    unless ``keep_records`` (a promoted rule: :func:`records_stay_in_redis`).
    ``lifetime_seconds``: the record lifetime (closed epochs older than it are
    forgotten; None: never by age)."""
    script = register(client, REBASE_PARTITION)
    drop_records = 1 if generation.landed() is not None and not keep_records else 0
    lifetime = lifetime_seconds if lifetime_seconds is not None else NEVER_SECONDS
    boundary = generation.boundary
    boards = [b for b in generation.board_names() if b not in exclude]
    segments = {board: generation.board(board) for board in boards}
    counts = {
        board: partition_counts(segment, partitions)
        for board, segment in segments.items()
        if segment is not None
    }
    report: dict[int, str] = {}
    for partition in range(partitions):
        keys = Keys(partition)
        position = int(boundary.get(str(partition), 0))
        # Stage boundaries and base counts beside the live keys; the script swaps them.
        pipe = client.pipeline(transaction=False)
        for board, segment in segments.items():
            if segment is None:
                continue
            pipe.delete(keys.staged_buckets(board))
            lowers = bucket_lowers(segment)
            if len(lowers):
                # Members "<index>/<count>": the event script reads both in one call.
                size = len(lowers)
                mapping = {
                    f"{i + 1}/{size}": float(lower)
                    for i, lower in enumerate(lowers.tolist())
                }
                pipe.zadd(keys.staged_buckets(board), mapping)
            packed = pa.py_buffer(
                counts[board][partition].astype(">i4").tobytes()
            ).to_pybytes()
            pipe.set(keys.staged_counts(board), packed)
        pipe.execute()

        board_set = (set(boards) | _boards_with_changes(client, partition)) - set(
            exclude
        )
        snapshot: dict[str, dict[str, list[int | None] | None]] = {}

        def lookup(board: str, player: str) -> list[int | None] | None:
            if segments.get(board) is None:
                return None
            found = base_row(generation, board, partitions, player)
            if found is None:
                return None
            row, score, achieved = found
            return [score, achieved, row]

        drop = _droppable(client, keys, generation, segments, partitions)
        pending = _tail_pairs(client, keys, position)
        # Shadowed players' scores in the generation (normally none: publish leaves
        # them out), so the script can hide any it still holds.
        for flagged in client.hkeys(keys.flags):
            name = flagged.decode() if isinstance(flagged, bytes) else flagged
            pending |= {(board, name) for board in segments}
        outcome = "unresolved"
        for _ in range(MAX_ATTEMPTS):
            for board, player in pending:
                board_set.add(board)
                snapshot.setdefault(board, {})[player] = lookup(board, player)
            ordered = sorted(board_set)
            script_keys = REBASE_PARTITION.keys_of(
                {
                    "base": keys.base_generation,
                    "log": keys.log,
                    "landed": keys.landed,
                    "flags": keys.flags,
                    "position": keys.position,
                },
                [
                    {
                        "totals": keys.totals(board),
                        "chz": keys.changed_live(board),
                        "chb": keys.changed_snapshot(board),
                        "chc": keys.changed_counts(board),
                        "fw": keys.fenwick(board),
                        "bk": keys.buckets(board),
                        "bk_next": keys.staged_buckets(board),
                        "cnt_next": keys.staged_counts(board),
                    }
                    for board in ordered
                ],
            )
            args = REBASE_PARTITION.args_of(
                {
                    "generation": generation.number,
                    "boundary": position,
                    "n_boards": len(ordered),
                    "snapshot_json": orjson.dumps(snapshot),
                    "drop_json": orjson.dumps(drop),
                    "drop_records": drop_records,
                    "slice": (
                        slice_of(time.time(), lifetime)
                        if lifetime_seconds is not None
                        else -1
                    ),
                    "wall_s": int(time.time()),
                    "lifetime": lifetime,
                },
                rest=ordered,
            )
            kind, payload = script(keys=script_keys, args=args)
            kind = kind.decode() if isinstance(kind, bytes) else kind
            payload = payload.decode() if isinstance(payload, bytes) else payload
            if kind == "retry":
                # Events arrived after the tail was read: look those players up too.
                pending = {(b, p) for b, p in orjson.loads(payload)}
                continue
            outcome = kind if kind == "ok" else f"{kind}: {payload}"
            if kind == "ok":
                delete_epochs(client, keys, parse_epochs(payload.partition("|")[2]))
            break
        if outcome != "ok":
            # Not switched (stale or unresolved): drop what was staged for it.
            stale = [keys.staged_buckets(b) for b in segments] + [
                keys.staged_counts(b) for b in segments
            ]
            if stale:
                client.delete(*stale)
        report[partition] = outcome
        log.info("rebase %s partition %d: %s", generation.id, partition, outcome)
    return RebaseReport(generation.id, report)


def records_stay_in_redis(settings: Settings) -> bool:
    """Whether landed records must stay in Redis instead of being answered by the
    landed records index: while a season runs under a promoted rule (``lb replay
    --promote``). The index holds contribution records as the log wrote them, with
    points scored under the rule before the promotion, and a later correction
    subtracts what the record says; ``lb rebuild`` (run by the promotion) rewrites the
    rescored boards' points in records Redis holds, so Redis keeps them all."""
    return bool(load_rule_state(settings.data_dir).promoted)


def rebase_published(settings: Settings, generation_id: str) -> RebaseReport:
    """Rebase the speed layer of ``settings`` onto a generation just published."""
    registry = GenerationRegistry(settings.segments_dir, settings.retained_generations)
    registry.refresh(force=True)
    number = int(generation_id.lstrip("g"))
    generation = registry.by_number(number)
    if generation is None:
        raise RuntimeError(
            f"generation {generation_id} is not readable in {settings.segments_dir}"
        )
    from conf.boards import load_boards
    from speed.closed import drop_board_keys, final_boards

    final = final_boards(load_boards(settings.boards_file), generation.manifest)
    client = sync_client(resolve_redis_url(settings))
    try:
        report = rebase(
            client,
            generation,
            settings.partitions,
            exclude=final,
            lifetime_seconds=settings.record_ttl_seconds,
            keep_records=records_stay_in_redis(settings),
        )
        # Closed windows leave Redis once their final generation is published.
        if final:
            drop_board_keys(client, settings.partitions, final)
        return report
    finally:
        client.close()
