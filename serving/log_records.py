"""A log record's result (one home for reading it).

A log record is the JSON text ``speed/lua/apply_event.lua`` appends to its
partition's log for every event it decides (bronze ``raw`` keeps it as written)::

    {"partition", "position", "receivedAtMs", "status", "event": {...},
     "result": {"status", "items": [[board, total, version(, status)], ...]},
     "rc": "<the match's contribution record>"}

``result.items`` holds one array per board the event named, in the reply's order:
the board id, its total and version after the event, and the board's own status
when it differs from the result's (``late-review``). A held event names no board
(``items`` is empty; Lua's cjson writes an empty table as ``{}``).

Why arrays: the log entry is most of what an unlanded event keeps in Redis, and
the objects this replaced (``result.boards``, ``{"board", "total", "version"}``
each, beside copies of the record's eventId, playerId, partition and position)
were about half of it (docs/CAPACITY.md). Records written before still carry that
form, in Redis logs not yet trimmed and in bronze for good: every Python reader
takes a record's items through :func:`board_items` (or the whole result through
:func:`logged_result`), which read both. Spark reads the
versions from ``raw`` itself (jobs/versions.py, both forms); the rebase script
reads the log in Lua (speed/lua/rebase_partition.lua, both forms).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def board_items(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The result's board items as objects (``board``, ``total``, ``version`` and
    ``status`` when the board's differs from the result's), in the logged order."""
    items = result.get("items")
    if not items:
        # An older record (objects under "boards"), or no board at all.
        return [dict(item) for item in result.get("boards") or []]
    out = []
    for item in items:
        entry: dict[str, Any] = {
            "board": item[0],
            "total": item[1],
            "version": item[2],
        }
        if len(item) > 3:
            entry["status"] = item[3]
        out.append(entry)
    return out


def logged_result(record: Mapping[str, Any]) -> dict[str, Any]:
    """The result of a log record as the event's 200 body gave it: ``eventId``,
    ``playerId``, ``status``, ``boards`` (objects), ``partition``, ``position``."""
    result = record.get("result") or {}
    event = record.get("event") or {}
    return {
        "eventId": event.get("eventId"),
        "playerId": event.get("playerId"),
        "status": result.get("status") or record.get("status"),
        "boards": board_items(result),
        "partition": record.get("partition"),
        "position": record.get("position"),
    }
