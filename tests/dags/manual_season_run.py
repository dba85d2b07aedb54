"""Run with the Airflow venv's python: the season_close DAG's first task, as a
manual run (`airflow dags trigger -c '{"season": ...}'`) calls it in Airflow 3 --
a context with the run's conf and no logical date. Prints the season it chose."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from unittest import mock

from airflow.dag_processing.dagbag import DagBag


def main(folder: str, season: str) -> None:
    dag = DagBag(dag_folder=folder).get_dag("season_close")
    task = dag.get_task("season")
    context = {"dag_run": SimpleNamespace(conf={"season": season})}
    # The DagBag imports the file under its own module name: patch the task
    # function's own globals.
    scope = task.python_callable.__globals__
    with mock.patch.dict(scope, {"get_current_context": lambda: context}):
        print(task.python_callable())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
