"""
### replay_season

Manual only. Replays a season's recorded events under another scoring rule, like
`lb replay --season S --rule R [--promote]`:

1. **replay**: registers the replay, publishes a generation holding the season and
   `season:S@R:<scope>`, writes the diff to `gold_replay_diffs` and returns the
   per-scope summary (players moving more than K ranks, tier changes, movers);
2. **promote**: only when the run's `promote` param is true: switches the season to
   the rule (audited as `rule.promote`) through another generation.

Params: `season` (e.g. `S4`), `rule` (e.g. `v2`), `game` (default `default`: the
season's game, like `lb replay --game`), `k` (default 10), `promote` (default
false), `reason` (recorded in the audit trail).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task

from dags._common import DEFAULT_ARGS, START, TAGS, settings


@dag(
    dag_id="replay_season",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=TAGS,
    params={
        "season": Param("S4", type="string"),
        "rule": Param("v2", type="string"),
        "game": Param("default", type="string"),
        "k": Param(10, type="integer", minimum=0),
        "promote": Param(False, type="boolean"),
        "reason": Param("", type="string"),
    },
    doc_md=__doc__,
)
def replay_season() -> None:
    @task
    def replay(params: dict[str, Any] | None = None) -> dict[str, Any]:
        import logging

        from jobs.replay import run_replay

        p = params or {}
        summary = run_replay(
            settings(),
            str(p["season"]),
            str(p["rule"]),
            k=int(p.get("k", 10)),
            game=str(p.get("game") or "default"),
        )
        for line in summary.lines():
            logging.getLogger(__name__).info("%s", line)
        return {"generation": summary.generation, "scopes": summary.scopes}

    @task.short_circuit
    def wants_promotion(params: dict[str, Any] | None = None) -> bool:
        return bool((params or {}).get("promote"))

    @task
    def promote(replayed: dict[str, Any], params: dict[str, Any] | None = None) -> str:
        from jobs.replay import promote_season

        p = params or {}
        return promote_season(
            settings(),
            str(p["season"]),
            str(p["rule"]),
            actor="airflow:replay_season",
            reason=str(p.get("reason") or "") or None,
            replay_generation=replayed["generation"],
            scopes=replayed["scopes"],
            game=str(p.get("game") or "default"),
        )

    replayed = replay()
    replayed >> wants_promotion() >> promote(replayed)


replay_season()
