"""
### publish_generation

Publishes one generation of every board, every `LB_PUBLISH_EVERY_MINUTES` minutes
(default 5): the same work as `lb publish`, one task per step so each can be retried
and watched on its own.

1. **land**: the partition logs (with the audit stream and award versions) into
   Delta; returns the boundary (landed-through position per partition) and when
   landing started;
2. **recompute**: silver and the ranked gold snapshot of the next generation;
3. **publish**: serving segments, manifest row, then `manifest.json` (visible);
4. **rebase**: the speed layer onto the new generation.

One run at a time (`max_active_runs=1`), no catch-up of missed intervals (a
generation is "now", not "as of then"); every step is idempotent on retry.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag

from dags._common import DEFAULT_ARGS, START, TAGS, publish_chain, settings


def _interval() -> timedelta:
    return timedelta(minutes=settings().publish_every_minutes)


@dag(
    dag_id="publish_generation",
    schedule=_interval(),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=TAGS,
    doc_md=__doc__,
)
def publish_generation() -> None:
    publish_chain(compact=False)


publish_generation()
