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


def publish_chain(compact: bool = False) -> None:
    """The four tasks of a publish (land, recompute, publish, rebase), wired in
    order inside the calling ``@dag`` function; ``compact``: every board of the new
    generation written as a full base (`lb publish --compact`)."""
    from airflow.sdk import task

    @task
    def land() -> dict[str, Any]:
        from jobs.publish_steps import land_step

        return land_step(settings())

    @task
    def recompute(landed: dict[str, Any]) -> str:
        from jobs.publish_steps import recompute_step

        return recompute_step(settings(), landed)

    @task
    def publish(generation: str, landed: dict[str, Any]) -> str:
        from jobs.publish_steps import publish_step

        return publish_step(settings(), generation, landed, compact=compact)

    @task
    def rebase(generation: str) -> dict[str, str]:
        from jobs.publish_steps import rebase_step

        return rebase_step(settings(), generation)

    landed = land()
    rebase(publish(recompute(landed), landed))
