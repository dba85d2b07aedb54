"""
### season_close

One run per season of the boards file, at its close time (`end + allowedLateness`).
A run for another moment (or a manual run) names the season in its conf:
`{"season": "S4"}`, and `"game"` for a game other than default (API.md "Games").

1. **season**: which season this run closes;
2. **wait_complete**: a sensor, until the close time has passed and every partition
   can land through it (Redis answers, each log continues where Delta stops: nothing
   was lost before landing);
3. **close**: `jobs.season.close_season`: the final generation and the immutable
   award snapshot (the same as `lb season close`);
4. **verify_awards**: the award snapshot equals the final generation's ranking with
   the configured tiers, and that generation equals an offline recompute from Delta.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import PokeReturnValue, dag, get_current_context, task
from airflow.timetables.events import EventsTimetable

from dags._common import DEFAULT_ARGS, START, TAGS, settings


def _close_times() -> Any:
    """A run at each season's close time, from the boards file."""
    from conf.boards import game_seasons, load_boards

    boards = load_boards(settings().boards_file)
    cutoffs = sorted({season.cutoff for _, season in game_seasons(boards)})
    if not cutoffs:
        return None
    return EventsTimetable(
        event_dates=cutoffs, restrict_to_events=True, description="season close times"
    )


@dag(
    dag_id="season_close",
    schedule=_close_times(),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=[*TAGS, "season"],
    doc_md=__doc__,
)
def season_close() -> None:
    @task
    def season() -> str:
        from jobs.season_ops import season_for_run

        context = get_current_context()
        conf = (context.get("dag_run").conf or {}) if context.get("dag_run") else {}
        # A manual run (`airflow dags trigger`) has no logical date in Airflow 3:
        # its conf names the season.
        logical_date = context.get("logical_date")
        requested = conf.get("season")
        if requested and conf.get("game"):
            # Another game's season: its internal id (conf.boards.qualify).
            from conf.boards import qualify

            requested = qualify(str(conf["game"]), str(requested))
        return season_for_run(settings(), requested, logical_date)

    @task.sensor(poke_interval=60, timeout=6 * 3600, mode="reschedule")
    def wait_complete(season_id: str) -> PokeReturnValue:
        from jobs.season_ops import completeness

        done, why = completeness(settings(), season_id)
        if not done:
            import logging

            logging.getLogger(__name__).info(
                "season %s not complete: %s", season_id, why
            )
        return PokeReturnValue(is_done=done, xcom_value=season_id)

    @task(retries=2, retry_delay=timedelta(minutes=1))
    def close(season_id: str) -> str:
        from jobs.season import close_season

        close_season(settings(), season_id)
        return season_id

    @task(retries=0)
    def verify_awards(season_id: str) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from api.served import served_reads
        from jobs.season_ops import verify_awards as check

        lb_settings = settings()
        with served_reads(lb_settings) as served:
            result = check(lb_settings, season_id, served)
        if result["divergences"]:
            raise AirflowFailException(
                f"award snapshot of {season_id} diverges: "
                + "; ".join(result["divergences"][:20])
            )
        return result

    verify_awards(close(wait_complete(season())))


season_close()
