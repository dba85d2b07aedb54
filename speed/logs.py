"""Where the partitions' logs stand, read for ``lb status``, /metrics and the late
review: positions, landed marks, base generations, log records, changed-set sizes.

The API reads these through here, never by building a key itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import redis
import redis.asyncio

from speed.partitions import KEY_PREFIX, Keys


@dataclass(frozen=True, slots=True)
class Progress:
    """One partition's log: last position handed out, landed up to, base generation."""

    position: int
    landed: int
    base_generation: int


def progress(client: redis.Redis, partitions: int) -> list[Progress]:
    """Every partition's :class:`Progress`, in one pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for p in range(partitions):
        keys = Keys(p)
        pipe.get(keys.position)
        pipe.get(keys.landed)
        pipe.hget(keys.base_generation, "g")
    values = [int(v or 0) for v in pipe.execute()]
    return [Progress(*values[3 * p : 3 * p + 3]) for p in range(partitions)]


def first_received_after(
    client: redis.Redis, partition: int, position: int
) -> int | None:
    """receivedAtMs of the partition's first log entry after ``position``, None
    when none."""
    entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
        Keys(partition).log, min=f"({position}-0" if position else "-", max="+", count=1
    )
    if not entries:
        return None
    record = orjson.loads(entries[0][1][b"r"])
    return int(record["receivedAtMs"])


def changed_players(client: redis.Redis) -> dict[str, int]:
    """Members of the live changed-sets per board, all partitions, by board name."""
    counts: dict[str, int] = {}
    for key in client.scan_iter(match=f"{KEY_PREFIX}:*:chz:*", count=1000):
        board = key.decode().split(":chz:", 1)[1]
        counts[board] = counts.get(board, 0) + int(client.zcard(key))
    return dict(sorted(counts.items()))


async def log_records(client: redis.asyncio.Redis, partitions: int) -> list[Any]:
    """Every record still in the partitions' logs (the tails not yet trimmed), in
    partition then log order (one pipelined round trip)."""
    pipe = client.pipeline(transaction=False)
    for partition in range(partitions):
        pipe.xrange(Keys(partition).log, min="-", max="+")
    tails = await pipe.execute()
    return [orjson.loads(fields[b"r"]) for tail in tails for _, fields in tail]
