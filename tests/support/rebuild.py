"""The speed layer's state in Redis, logs aside: read it, wipe it (rebuild tests)."""

from __future__ import annotations

from typing import Any

import redis

# Fields of a partition's base hash a rebuild restores (the record epochs' fields,
# speed/records.py, are not a function of the log: which epoch holds a record is
# not compared, only which records Redis holds).
BASE_FIELDS = (b"g", b"pos")


def speed_keys(client: redis.Redis) -> dict[bytes, Any]:
    """Every speed-layer key but the logs, by value (TTLs aside); the record
    buckets of all epochs as one record set per partition and kind."""
    state: dict[bytes, Any] = {}
    for key in client.scan_iter(match="lb:*"):
        kind = client.type(key)
        if kind == b"stream":
            continue
        parts = key.split(b":")
        if len(parts) == 5 and parts[2] in (b"rd", b"rc"):
            # One entry per partition and kind ("lb:{pN}:rc:*"), whatever the epoch.
            records = state.setdefault(b":".join([*parts[:3], b"*"]), {})
            records.update(client.hgetall(key))
            continue
        if len(parts) == 3 and parts[2] == b"base":
            fields = client.hgetall(key)
            kept = {f: v for f, v in fields.items() if f in BASE_FIELDS}
            if kept:
                state[key] = kept
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
