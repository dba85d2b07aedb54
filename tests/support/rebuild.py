"""The speed layer's state in Redis, logs aside: read it, wipe it (rebuild tests)."""

from __future__ import annotations

from typing import Any

import redis


def speed_keys(client: redis.Redis) -> dict[bytes, Any]:
    """Every speed-layer key but the logs, by value (TTLs aside)."""
    state: dict[bytes, Any] = {}
    for key in client.scan_iter(match="lb:*"):
        kind = client.type(key)
        if kind == b"stream":
            continue
        if kind == b"string":
            state[key] = client.get(key)
        elif kind == b"hash":
            state[key] = client.hgetall(key)
        elif kind == b"zset":
            state[key] = client.zrange(key, 0, -1, withscores=True)
        else:
            state[key] = kind
    return state


def wipe_all_but_logs(client: redis.Redis) -> None:
    for key in list(client.scan_iter(match="lb:*")):
        if client.type(key) != b"stream":
            client.delete(key)
