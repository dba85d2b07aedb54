"""The audit trail of admin actions: durable at once in Redis, landed into Delta.

Every admin action (corrections' reviews, flags, quarantine decisions, rule
promotions, adjudications) is recorded with :func:`record_audit` before the call
answers: one entry on the stream ``lb:{audit}:log`` (its own hash tag, so it lives in
one Redis Cluster slot beside no partition's keys). With ``appendfsync always`` the
reply means the entry is on disk. ``jobs/audit.py`` lands the stream into the Delta
table ``gold_audit`` (idempotent per stream id) and trims only what Delta committed.

An entry is one field ``r`` holding JSON: ``atMs`` (server clock), ``actor`` (the
admin key id, or ``cli:<user>`` for local commands), ``action``, ``subject``,
``reason`` and ``details`` (any JSON object).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import redis
import redis.asyncio as aioredis

from speed.partitions import KEY_PREFIX

AUDIT_STREAM = f"{KEY_PREFIX}:{{audit}}:log"


def audit_entry(
    actor: str,
    action: str,
    subject: str,
    reason: str | None,
    details: dict[str, Any] | None = None,
    now_ms: int | None = None,
) -> bytes:
    """The JSON of one audit entry (the format ``jobs/audit.py`` reads)."""
    if not actor or not action:
        raise ValueError("an audit entry needs an actor and an action")
    return orjson.dumps(
        {
            "atMs": int(time.time() * 1000) if now_ms is None else now_ms,
            "actor": actor,
            "action": action,
            "subject": subject,
            "reason": reason,
            "details": details or {},
        }
    )


def decode_entry(raw: bytes) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(raw)
    return data


async def record_audit(
    client: aioredis.Redis,
    actor: str,
    action: str,
    subject: str,
    reason: str | None,
    details: dict[str, Any] | None = None,
) -> str:
    """Append one audit entry (API process); returns its stream id."""
    entry_id = await client.xadd(
        AUDIT_STREAM, {"r": audit_entry(actor, action, subject, reason, details)}
    )
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def append_audit(client: aioredis.Redis, entries: list[bytes]) -> None:
    """Append entries made by :func:`audit_entry` (one pipelined round trip)."""
    if not entries:
        return
    pipe = client.pipeline(transaction=False)
    for entry in entries:
        pipe.xadd(AUDIT_STREAM, {"r": entry})
    await pipe.execute()


def record_audit_sync(
    client: redis.Redis,
    actor: str,
    action: str,
    subject: str,
    reason: str | None,
    details: dict[str, Any] | None = None,
) -> str:
    """Append one audit entry (CLI and jobs); returns its stream id."""
    entry_id = client.xadd(
        AUDIT_STREAM, {"r": audit_entry(actor, action, subject, reason, details)}
    )
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
