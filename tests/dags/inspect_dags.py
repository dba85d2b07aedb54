"""Run with the Airflow venv's python: loads dags/ into a DagBag and writes, as JSON
to the file given second, the import errors and each DAG's schedule, policies and task
graph (the pytest side, in the project's venv, asserts on it)."""

from __future__ import annotations

import json
import sys

from airflow.dag_processing.dagbag import DagBag


def main(folder: str, out: str) -> None:
    # Examples are off through AIRFLOW__CORE__LOAD_EXAMPLES=False (Airflow 3 dropped
    # the include_examples argument).
    bag = DagBag(dag_folder=folder)
    dags = {}
    for dag_id, dag in bag.dags.items():
        dags[dag_id] = {
            "schedule": repr(dag.timetable),
            "events": [
                d.isoformat() for d in getattr(dag.timetable, "event_dates", [])
            ],
            "timetable": type(dag.timetable).__name__,
            "catchup": dag.catchup,
            "max_active_runs": dag.max_active_runs,
            "tags": sorted(dag.tags),
            "start_date": dag.start_date.isoformat() if dag.start_date else None,
            "has_doc": bool(dag.doc_md),
            "tasks": {
                task.task_id: {
                    "retries": task.retries,
                    "exponential_backoff": bool(task.retry_exponential_backoff),
                    "upstream": sorted(task.upstream_task_ids),
                }
                for task in dag.tasks
            },
        }
    # To a file: Airflow logs to stdout.
    with open(out, "w") as fh:
        errors = {k: str(v) for k, v in bag.import_errors.items()}
        json.dump({"import_errors": errors, "dags": dags}, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
