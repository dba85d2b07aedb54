"""Closed windows leave Redis: once a board's final generation is published, its
speed-layer keys are dropped and reads come from the generation's segments.

A generation is *final* for a board that closed (``conf.boards.board_closes_at``)
before the generation's landing started (``landingStartedAt`` in its manifest):
every event received before the close time was in the log then, and later events are
``late-review`` for the board, so nothing can change it any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from conf.boards import BoardsConfig, board_closes_at, split_board
from conf.settings import Settings
from serving.registry import GenerationRegistry
from speed.connection import sync_client
from speed.partitions import KEY_PREFIX, Keys, tag
from speed.server import resolve_redis_url


def final_boards(config: BoardsConfig, manifest: Mapping[str, Any]) -> set[str]:
    """Boards of a generation that closed before its landing started: the
    generation holds their final state."""
    started = manifest.get("landingStartedAt")
    if not started:
        return set()
    moment = datetime.fromisoformat(started.replace("Z", "+00:00"))
    final = set()
    for board in manifest.get("boards", {}):
        closes = board_closes_at(config, board)
        if closes is not None and closes < moment:
            final.add(board)
    return final


@dataclass(frozen=True)
class DropReport:
    boards: int
    keys: int
    bytes_freed: int


def drop_board_keys(
    client: redis.Redis, partitions: int, boards: set[str]
) -> DropReport:
    """Delete the speed-layer keys of closed boards (every partition); the bytes
    freed are Redis' own MEMORY USAGE of each key before it goes.

    Boards already dropped cost one EXISTS per partition: every later generation
    still holds them, so this runs again at each publish.
    """
    ordered = sorted(boards)
    probe = client.pipeline(transaction=False)
    for partition in range(partitions):
        keys = Keys(partition)
        for board in ordered:
            probe.exists(keys.totals(board), keys.fenwick(board), keys.buckets(board))
    found = probe.execute()
    live = {
        board
        for i, count in enumerate(found)
        if count
        for board in [ordered[i % len(ordered)]]
    }
    keys_dropped = 0
    freed = 0
    if not live:
        return DropReport(0, 0, 0)
    for partition in range(partitions):
        keys = Keys(partition)
        names: list[str] = []
        for board in sorted(live):
            names += [
                keys.totals(board),
                keys.changed_live(board),
                keys.changed_snapshot(board),
                keys.changed_counts(board),
                keys.fenwick(board),
                keys.buckets(board),
                keys.staged_buckets(board),
                keys.staged_counts(board),
            ]
        # Best-of state per (board, player) exists only on season boards (max).
        seasons = tuple(
            f"{KEY_PREFIX}:{tag(partition)}:mx:{b}:"
            for b in live
            if split_board(b)[1].startswith("season:")
        )
        if seasons:
            names += [
                name
                for name in (
                    k.decode()
                    for k in client.scan_iter(
                        # *season: also matches another game's (arena~season:).
                        match=f"{KEY_PREFIX}:{tag(partition)}:mx:*season:*",
                        count=1000,
                    )
                )
                if name.startswith(seasons)
            ]
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.memory_usage(name, samples=0)
        sizes = pipe.execute()
        present = [n for n, size in zip(names, sizes, strict=True) if size]
        freed += sum(int(size) for size in sizes if size)
        for first in range(0, len(present), 500):
            client.delete(*present[first : first + 500])
        keys_dropped += len(present)
    return DropReport(len(live), keys_dropped, freed)


def drop_closed_windows(settings: Settings, config: BoardsConfig) -> DropReport:
    """Drop the speed-layer keys of every board final in the latest generation."""
    registry = GenerationRegistry(settings.segments_dir, settings.retained_generations)
    registry.refresh(force=True)
    latest = registry.latest()
    if latest is None:
        return DropReport(0, 0, 0)
    boards = final_boards(config, latest.manifest)
    if not boards:
        return DropReport(0, 0, 0)
    client = sync_client(resolve_redis_url(settings))
    try:
        return drop_board_keys(client, settings.partitions, boards)
    finally:
        client.close()
