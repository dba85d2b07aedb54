"""
### rebuild_speed_layer

Manual only. Rebuilds the speed layer (totals, changed-sets, Fenwick trees,
contribution and dedupe records) from the newest generation plus the log after its
boundary, like `lb rebuild`:

1. **diff**: a dry run; logs every difference between the live Redis state and the
   rebuild and returns their count (nothing changes);
2. **switch**: builds aside and switches in atomically per partition. Skipped when
   the dry run found nothing and the run's `force` param is false.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, task

from dags._common import DEFAULT_ARGS, START, TAGS, settings


@dag(
    dag_id="rebuild_speed_layer",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=TAGS,
    params={"force": Param(False, type="boolean")},
    doc_md=__doc__,
)
def rebuild_speed_layer() -> None:
    @task
    def diff() -> int:
        import logging

        from jobs.rebuild import run_rebuild
        from speed.rebuild import describe

        report = run_rebuild(settings(), dry_run=True)
        for line in describe(report.differences):
            logging.getLogger(__name__).info("difference: %s", line)
        return len(report.differences)

    @task.short_circuit
    def needs_switch(differences: int, params: dict | None = None) -> bool:
        return differences > 0 or bool((params or {}).get("force"))

    @task
    def switch() -> dict[str, str]:
        from jobs.rebuild import run_rebuild

        report = run_rebuild(settings())
        return {str(p): o for p, o in report.partitions.items()}

    needs_switch(diff()) >> switch()


rebuild_speed_layer()
