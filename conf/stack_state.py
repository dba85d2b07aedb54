"""The local stack supervisor's state file, ``$LB_DATA_DIR/run/supervisor.json``.

Written by `lb up`'s supervisor (cli/supervisor.py) at every start, restart and stop;
read by `lb status` and by the API's ``/metrics`` (``lb_supervisor_restarts_total``),
which must not import ``cli``. Shape::

    {"state": "running" | "restarting redis" | "restarting api" | "stopped",
     "pid": <supervisor pid>, "startedAt": ISO-8601,
     "limit": "5/60",
     "restarts": {"redis": 0, "api": 0},
     "events": [{"at": ISO-8601, "process": "redis", "reason": "..."}, ...],
     "stoppedReason": "..." (once stopped)}

``events`` keeps the last :data:`MAX_EVENTS` restarts (and failed restarts). The
event of an API worker that died under uvicorn (which starts a new one) also names
the worker: ``"worker": <pid>``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STATE_FILE = "supervisor.json"
PROCESSES = ("redis", "api")
MAX_EVENTS = 20


def read_stack_state(run_dir: Path) -> dict[str, Any] | None:
    """The last state the supervisor wrote, or None (no `lb up` on this data dir, or
    a file being replaced: the next read sees the new one)."""
    try:
        state = json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def write_stack_state(run_dir: Path, state: dict[str, Any]) -> None:
    """Replace the file atomically (a reader sees the old or the new state)."""
    path = run_dir / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, sort_keys=True))
    os.replace(tmp, path)


def restart_counts(state: dict[str, Any] | None) -> dict[str, int]:
    """Restarts per process (every process in :data:`PROCESSES`, 0 when none)."""
    counts = (state or {}).get("restarts") or {}
    return {name: int(counts.get(name, 0) or 0) for name in PROCESSES}
