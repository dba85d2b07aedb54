"""Reads while Redis is unreachable: answer from the latest generation.

A live or approximate read needs the speed layer; without it the latest published
generation still answers exactly what it is, so the answer carries the snapshot's
labels (``basis: snapshot``, its generation, ``asOf`` = its boundary) plus
``liveLayer: "unavailable"`` and the header ``X-Live-Layer: unavailable``. Writes keep
answering 503 with ``Retry-After`` (api/errors.py): an event cannot be acknowledged
without Redis making it durable.
"""

from __future__ import annotations

from redis.exceptions import RedisError

from api.errors import LiveUnavailable
from api.metrics import DEGRADED_READS, REDIS_ERRORS
from conf.boards import BoardsConfig
from serving.registry import Generation, GenerationNotFoundError, GenerationRegistry
from serving.segments import BoardSegment

REDIS_DOWN = (RedisError, OSError)
LIVE_LAYER_HEADER = "X-Live-Layer"


def degraded_snapshot(
    config: BoardsConfig, registry: GenerationRegistry, board: str, endpoint: str
) -> tuple[Generation, BoardSegment | None]:
    """The latest generation's board; LiveUnavailable when none is published."""
    REDIS_ERRORS.labels("read").inc()
    try:
        generation = registry.get(None)
    except GenerationNotFoundError:
        raise LiveUnavailable(
            "the live layer is unavailable and no generation is published yet"
        ) from None
    DEGRADED_READS.labels(endpoint).inc()
    return generation, generation.board(board)
