"""Period ids of the rolling windows, formatted in one place for every layer.

The speed layer formats a period with Python's ``%`` and Spark with
``F.format_string`` (Java's ``String.format``); both take the printf-style patterns
below with the same integer fields, so a board id is the same string in Redis, in
Delta and in the serving segments. Years are zero-padded to four digits (year 1 is
``0001``), as ISO 8601 writes them.
"""

from __future__ import annotations

from datetime import UTC, datetime

# (window, pattern, fields): the fields are named after what each layer extracts.
DAILY = "%04d-%02d-%02d"  # year, month, day
WEEKLY = "%04d-W%02d"  # ISO year, ISO week
MONTHLY = "%04d-%02d"  # year, month
ALLTIME = "all"


def period_ids(moment: datetime) -> list[tuple[str, str]]:
    """(window, period) of every rolling window holding ``moment`` (UTC)."""
    moment = moment.astimezone(UTC)
    iso_year, iso_week, _ = moment.isocalendar()
    return [
        ("daily", DAILY % (moment.year, moment.month, moment.day)),
        ("weekly", WEEKLY % (iso_year, iso_week)),
        ("monthly", MONTHLY % (moment.year, moment.month)),
        ("alltime", ALLTIME),
    ]
