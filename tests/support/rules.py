"""Boards on scoring rule v2 and a v2 match result (rule tests)."""

from __future__ import annotations

from typing import Any

from tests.support.clients import event
from tests.support.settings import OPEN_LATENESS

BOARDS_V2 = """
regions: [eu, na]
rule: {window_rule}
seasons:
  - id: S4
    start: "2026-11-01T00:00:00Z"
    end: "2026-12-01T00:00:00Z"
    allowedLateness: "OPEN"
    rule: v2
""".replace("OPEN", OPEN_LATENESS)  # open whatever the date


def match(n: int, at: str, placement: int = 1, kills: int = 3, **kw: Any) -> Any:
    record = {"placement": placement, "kills": kills, "durationSeconds": 900}
    return event(eventId=f"E{n}", matchId=f"M{n}", occurredAt=at, result=record, **kw)
