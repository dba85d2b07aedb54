"""
### verify_generation

Hourly, like `lb verify`: compares the served snapshot and live answers (top 100,
100 sampled players and the tier boundaries of every board) with an offline
computation in Spark from Delta. Writes a row to `ops_verify_runs` and the last
result read by `/metrics` (`lb_verify_divergences`). The task fails, naming every
divergence, when there is any: a failed run is the alert.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from dags._common import DEFAULT_ARGS, START, TAGS, settings


@dag(
    dag_id="verify_generation",
    schedule="@hourly",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args={**DEFAULT_ARGS, "retries": 1},
    tags=TAGS,
    doc_md=__doc__,
)
def verify_generation() -> None:
    @task
    def verify() -> dict[str, object]:
        from airflow.sdk.exceptions import AirflowFailException

        from api.served import served_reads
        from jobs.verify import run_verify

        lb_settings = settings()
        with served_reads(lb_settings) as served:
            result = run_verify(lb_settings, served)
        if result.divergences:
            # A divergence will not go away by retrying: fail without retries.
            raise AirflowFailException(
                f"{len(result.divergences)} divergences: "
                + "; ".join(result.divergences[:20])
            )
        return {"run": result.run_id, "checked": result.checked}

    verify()


verify_generation()
