"""Shadow removal: hide a player from every public answer, keep its scores.

Live answers change at once (``speed/lua/flag_player.lua`` takes the player out of
its partition's changed-sets and Fenwick trees, and the owner transaction keeps it
out while flagged); snapshots from the next generation, which publishes without
shadowed players (their rows go to a side file, for their own rank reads).
"""

from __future__ import annotations

from typing import Any

from serving.registry import GenerationRegistry
from speed.baserows import base_row, base_version
from speed.partitions import KEY_PREFIX, Keys, partition_of, tag
from speed.scripts import FLAG_PLAYER, register
from speed.store import SpeedLayer

ATTEMPTS = 5
SHADOW = "shadow"


class FlagRetry(RuntimeError):
    """The partition's base generation kept moving (a rebase in progress)."""


async def is_shadowed(speed: SpeedLayer, player_id: str) -> bool:
    keys = Keys(partition_of(player_id, speed.partitions))
    flag = await speed.client.hget(keys.flags, player_id)
    return flag in (b"shadow", "shadow")


async def shadowed_among(speed: SpeedLayer, players: list[str]) -> set[str]:
    """The shadowed players among ``players`` (one pipelined round trip)."""
    if not players:
        return set()
    pipe = speed.client.pipeline(transaction=False)
    for player in players:
        pipe.hget(Keys(partition_of(player, speed.partitions)).flags, player)
    flags = await pipe.execute()
    return {
        p for p, f in zip(players, flags, strict=True) if f in (b"shadow", "shadow")
    }


async def _boards_of(speed: SpeedLayer, partition: int, player_id: str) -> set[str]:
    """Boards of the partition whose live totals hold the player."""
    keys = Keys(partition)
    prefix = f"{KEY_PREFIX}:{tag(partition)}:tot:"
    names = []
    async for key in speed.client.scan_iter(match=f"{prefix}*", count=1000):
        text = key.decode() if isinstance(key, bytes) else key
        names.append(text[len(prefix) :])
    pipe = speed.client.pipeline(transaction=False)
    for name in names:
        pipe.hexists(keys.totals(name), player_id)
    found = await pipe.execute()
    return {name for name, hit in zip(names, found, strict=True) if hit}


async def set_flag(
    speed: SpeedLayer, registry: GenerationRegistry, player_id: str, action: str
) -> dict[str, Any]:
    """Shadow or restore ``player_id``; idempotent (``changed`` False when it was
    already in that state)."""
    partition = partition_of(player_id, speed.partitions)
    keys = Keys(partition)
    script = register(speed.client, FLAG_PLAYER)
    for _ in range(ATTEMPTS):
        raw = await speed.client.hget(keys.base_generation, "g")
        number = int(raw) if raw else 0
        generation = registry.by_number(number) if number else None
        if number and generation is None:
            registry.refresh(force=True)
            generation = registry.by_number(number)
            if generation is None:
                raise FlagRetry(f"base generation g{number} is not readable")
        boards = await _boards_of(speed, partition, player_id)
        # Per board: (score, achievedMs, local row) in the base generation.
        base_scores: dict[str, tuple[int, int | None, int, int | None]] = {}
        if generation is not None:
            for board in generation.board_names():
                found = base_row(generation, board, speed.partitions, player_id)
                if found is not None:
                    row, score, achieved = found
                    version = base_version(generation, board, player_id)
                    base_scores[board] = (score, achieved, row, version)
                    boards.add(board)
        ordered = sorted(boards)
        script_keys = FLAG_PLAYER.keys_of(
            # The partition's flags version moves in the same script (cached live
            # answers depend on it, speed/live.py ``stamp``): no read between two
            # commands can see the new flag under the old version, and a reply
            # lost after the script leaves no cached answer current.
            {
                "flags": keys.flags,
                "base": keys.base_generation,
                "flags_version": keys.flags_version,
            },
            [
                {
                    "totals": keys.totals(board),
                    "chz": keys.changed_live(board),
                    "chb": keys.changed_snapshot(board),
                    "chc": keys.changed_counts(board),
                    "fw": keys.fenwick(board),
                    "bk": keys.buckets(board),
                }
                for board in ordered
            ],
        )
        groups = []
        for board in ordered:
            known = base_scores.get(board)
            groups.append(
                {
                    "board": board,
                    "base_score": "" if known is None else known[0],
                    "base_achieved_ms": ""
                    if known is None or known[1] is None
                    else known[1],
                    "base_row": "" if known is None else known[2],
                    "base_version": ""
                    if known is None or known[3] is None
                    else known[3],
                }
            )
        args = FLAG_PLAYER.args_of(
            {
                "player": player_id,
                "action": action,
                "expected_generation": number,
                "n_boards": len(ordered),
            },
            groups,
        )
        kind, payload = await script(keys=script_keys, args=args)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "retry":
            continue
        touched = int(payload) if kind == "ok" else 0
        return {
            "playerId": player_id,
            "flag": SHADOW if action == "shadow" else None,
            "changed": kind == "ok",
            "boards": touched,
        }
    raise FlagRetry("the base generation kept moving; retry shortly")
