"""What every DAG of this folder shares: settings from the environment, tags and
retry policy. Kept import-light: the scheduler parses DAG files often, so Spark,
Redis and the project's jobs are imported inside task bodies only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

TAGS = ["leaderboard"]
START = datetime(2026, 1, 1, tzinfo=UTC)

# Retries with exponential backoff: 30 s, 60 s, 120 s (capped at 10 minutes).
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "leaderboard",
    "retries": 3,
    "retry_delay": timedelta(seconds=30),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}


def settings() -> Any:
    """The project's settings from the LB_* environment of the Airflow worker."""
    from conf.settings import Settings

    return Settings()
