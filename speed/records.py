"""Compact encodings of the per-event records of the speed layer (one home).

The saved result of a dedupe record (``<fingerprint>|<compact>``, written by
``apply_event.lua``, rebuilt by ``speed/rebuild.py``, read by ``speed/store.py``):

    <status>|<partition>|<position>|<item>;<item>...
    item = <board>,<total>,<version>[,<status>]

A board of one of the event's own rolling periods is written short, since the event
(same content, so same ``occurredAt``) names the period again on every redelivery:
``daily:2026-11-20:eu`` becomes ``d:eu`` when the event occurred on 2026-11-20, and
likewise ``w:`` (ISO week), ``m:`` (month) and ``a:`` (all-time). Every other board
(seasons; a day the event moved away from in a correction) keeps its full id. No
real window is one letter long, so the two forms never collide.
"""

from __future__ import annotations

from datetime import datetime

from conf.periods import period_ids

SHORT_WINDOW = {"daily": "d", "weekly": "w", "monthly": "m", "alltime": "a"}
LONG_WINDOW = {code: window for window, code in SHORT_WINDOW.items()}


def event_periods(occurred_at: datetime) -> dict[str, str]:
    """window -> period id of the rolling periods holding ``occurred_at``."""
    return dict(period_ids(occurred_at))


def short_board(board: str, periods: dict[str, str]) -> str:
    """The board as written in a saved result of an event with these periods."""
    window, _, rest = board.partition(":")
    code = SHORT_WINDOW.get(window)
    if code is None:
        return board
    period, _, scope = rest.partition(":")
    if periods.get(window) != period or not scope:
        return board
    return f"{code}:{scope}"


def long_board(name: str, periods: dict[str, str]) -> str:
    """The board id of a name read from a saved result (inverse of short_board)."""
    code, _, scope = name.partition(":")
    window = LONG_WINDOW.get(code)
    if window is None:
        return name
    return f"{window}:{periods[window]}:{scope}"
