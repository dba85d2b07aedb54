"""
### compact_generation

Daily, like `lb publish --compact`: publishes one generation whose every board is a
full base. A layered board (a base plus the layers incremental publishes wrote
over it, `serving/layers.py`) is compacted from its chain, with the same answers;
a touched board is written in full. Between runs the inline thresholds
(`LB_LAYERS_MAX_CHAIN`, `LB_LAYERS_MAX_FRACTION`) still compact a chain that grows
past them; this run bounds the chains of boards that change too little to reach
them (their layers would otherwise stay until the next season).

The same four steps as `publish_generation` (land, recompute, publish, rebase),
under the same publish lock: a compaction and a publish never write one
generation number twice (the publish step of the later one fails with
`GenerationTaken` and the next run recomputes).
"""

from __future__ import annotations

from airflow.sdk import dag

from dags._common import DEFAULT_ARGS, START, TAGS, publish_chain


@dag(
    dag_id="compact_generation",
    schedule="@daily",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=TAGS,
    doc_md=__doc__,
)
def compact_generation() -> None:
    publish_chain(compact=True)


compact_generation()
