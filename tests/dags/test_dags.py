"""The Airflow DAGs: every file imports (DagBag), schedules and policies are as
configured, and `airflow dags test` of publish_generation and season_close runs the
real tasks against real Redis, Spark and Delta.

Airflow lives in its own venv (`make airflow-venv`, see the Makefile); these tests
drive it as a subprocess with an embedded SQLite metadata DB under a temp
AIRFLOW_HOME. `make test` requires it (LB_REQUIRE_OPS_TOOLS=1); a bare pytest run
without that venv skips them, saying why.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from api.segments import GenerationRegistry
from conf.settings import Settings
from tests.conftest import SignedClient, event
from tests.support.spark import SUBPROCESS_ENV

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
BOARD = "season:S4:global"


def airflow_venv() -> Path:
    venv = Path(os.environ.get("LB_AIRFLOW_VENV", REPO / ".venv-airflow"))
    if not (venv / "bin" / "airflow").exists():
        reason = f"Airflow is not installed in {venv}: run `make airflow-venv`"
        if os.environ.get("LB_REQUIRE_OPS_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    return venv


class Airflow:
    """The Airflow CLI of the Airflow venv with one temp AIRFLOW_HOME."""

    def __init__(self, venv: Path, home: Path) -> None:
        self.venv = venv
        self.home = home
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LB_")},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # The DAGs' tasks import the project from this checkout, whatever the
            # venv's own install points at: an editable install maps each package
            # to the directory it was made from, so a venv built in another checkout
            # (LB_AIRFLOW_VENV=/elsewhere/.venv-airflow) would run that checkout's
            # jobs/ -- without the modules this one added.
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
            ),
            # The tasks' Spark shares the machine with the tests' own session.
            "LB_SPARK_DRIVER_MEMORY": "1g",
            **SUBPROCESS_ENV,
        }

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]],
            env={**self.env, **(env or {})},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def dags_test(self, dag_id: str, settings: Settings, *extra: str) -> str:
        """`airflow dags test` with the LB_* environment of ``settings``."""
        lb = {
            "LB_REDIS_URL": settings.redis_url or "",
            "LB_DATA_DIR": str(settings.data_dir),
            "LB_PARTITIONS": str(settings.partitions),
            "LB_RATE_LIMIT": settings.rate_limit,
        }
        if settings.boards_file:
            lb["LB_BOARDS_FILE"] = str(settings.boards_file)
        done = self.run("airflow", "dags", "test", dag_id, *extra, env=lb)
        out = done.stdout + done.stderr
        (self.home / f"{dag_id}.log").write_text(out)
        assert done.returncode == 0, out[-4000:]
        finished = [line for line in out.splitlines() if "DagRun Finished" in line]
        assert finished and "state=success" in finished[-1], out[-4000:]
        return out


@pytest.fixture(scope="session")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    cli = Airflow(airflow_venv(), tmp_path_factory.mktemp("airflow-home"))
    where = cli.run("python", "-P", "-c", "import jobs; print(jobs.__path__[0])")
    assert where.returncode == 0, where.stderr[-3000:]
    assert Path(where.stdout.strip()) == REPO / "jobs", (
        f"the Airflow venv imports jobs from {where.stdout.strip()}, not {REPO}"
    )
    migrated = cli.run("airflow", "db", "migrate")
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    yield cli


def test_dagbag_imports_every_dag_with_its_policies(airflow: Airflow) -> None:
    out = airflow.home / "dagbag.json"
    done = airflow.run(
        "python", str(REPO / "tests/dags/inspect_dags.py"), str(DAGS), str(out)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    bag = json.loads(out.read_text())
    assert bag["import_errors"] == {}
    dags = bag["dags"]
    assert set(dags) == {
        "publish_generation",
        "season_close",
        "rebuild_speed_layer",
        "verify_generation",
        "replay_season",
        "compact_generation",
    }
    for dag_id, dag in dags.items():
        assert dag["catchup"] is False, dag_id
        assert dag["max_active_runs"] == 1, dag_id
        assert "leaderboard" in dag["tags"], dag_id
        assert dag["start_date"] == "2026-01-01T00:00:00+00:00", dag_id
        assert dag["has_doc"], dag_id
    # Every 5 minutes (LB_PUBLISH_EVERY_MINUTES), one task per step, retried.
    publish = dags["publish_generation"]
    assert (
        "DeltaTriggerTimetable(delta=datetime.timedelta(seconds=300)"
        in (publish["schedule"])
    )
    assert list(publish["tasks"]) == ["land", "recompute", "publish", "rebase"]
    assert publish["tasks"]["rebase"]["upstream"] == ["publish"]
    assert all(
        t["retries"] == 3 and t["exponential_backoff"]
        for t in publish["tasks"].values()
    )
    # One run per season, at end + allowedLateness of the default boards file (S4).
    assert dags["season_close"]["events"] == ["2026-12-01T01:00:00+00:00"]
    assert list(dags["season_close"]["tasks"]) == [
        "season",
        "wait_complete",
        "close",
        "verify_awards",
    ]
    assert "expression='0 * * * *'" in dags["verify_generation"]["schedule"]
    # `lb publish --compact` daily, the publish DAG's four steps.
    compact = dags["compact_generation"]
    assert "expression='0 0 * * *'" in compact["schedule"]
    assert list(compact["tasks"]) == ["land", "recompute", "publish", "rebase"]
    assert compact["tasks"]["rebase"]["upstream"] == ["publish"]
    rebuild = dags["rebuild_speed_layer"]
    assert "NullTimetable" in rebuild["schedule"]  # manual only
    assert rebuild["tasks"]["switch"]["upstream"] == ["needs_switch"]
    assert rebuild["tasks"]["needs_switch"]["upstream"] == ["diff"]
    replay = dags["replay_season"]
    assert "NullTimetable" in replay["schedule"]  # manual only
    assert replay["tasks"]["wants_promotion"]["upstream"] == ["replay"]
    assert replay["tasks"]["promote"]["upstream"] == ["replay", "wants_promotion"]
    assert all(t["retries"] == 3 for t in replay["tasks"].values())


def test_publish_interval_comes_from_settings(airflow: Airflow) -> None:
    out = airflow.home / "dagbag-2.json"
    done = airflow.run(
        "python",
        str(REPO / "tests/dags/inspect_dags.py"),
        str(DAGS),
        str(out),
        env={"LB_PUBLISH_EVERY_MINUTES": "2"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    schedule = json.loads(out.read_text())["dags"]["publish_generation"]["schedule"]
    assert "delta=datetime.timedelta(seconds=120)" in schedule


def test_a_manual_season_close_run_has_no_logical_date_and_names_its_season(
    airflow: Airflow,
) -> None:
    # Airflow 3 gives a triggered run no logical date (`airflow dags test` does give
    # one, so the run below cannot catch this); the cluster demo found it.
    done = airflow.run(
        "python", str(REPO / "tests/dags/manual_season_run.py"), str(DAGS), "S4"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "S4"


def test_airflow_dags_test_publish_generation(
    airflow: Airflow,
    api: SignedClient,
    settings: Settings,
    redis_client: redis.Redis,
) -> None:
    scores = {"a1": 30, "a2": 10, "a3": 30, "a4": 0}
    for player, points in scores.items():
        reply = api.post(
            "/v1/score-events",
            event(eventId=f"E-{player}", playerId=player, result={"points": points}),
        )
        assert reply.status_code == 200, reply.text
    airflow.dags_test("publish_generation", settings)

    registry = GenerationRegistry(settings.segments_dir, settings.retained_generations)
    generation = registry.latest()
    assert generation is not None and generation.id == "g1"
    segment = generation.board(BOARD)
    assert segment is not None
    assert [e["playerId"] for e in segment.entries(0, 4)] == ["a1", "a3", "a2", "a4"]
    assert [e["rank"] for e in segment.entries(0, 4)] == [1, 1, 3, 4]
    # The rebase task moved every partition's speed layer onto g1.
    bases = {
        int(redis_client.hget(f"lb:{{p{p}}}:base", "g") or 0)
        for p in range(settings.partitions)
    }
    assert bases == {1}
    top = api.get(f"/v1/boards/{BOARD}/top").json()
    assert (top["basis"], top["generation"]["id"]) == ("live", "g1")


@pytest.mark.skipif(
    importlib.util.find_spec("jobs.season") is None,
    reason="season_close calls jobs.season.close_season (issue 8), which is not on "
    "this branch yet",
)
def test_airflow_dags_test_season_close(
    airflow: Airflow,
    redis_client: redis.Redis,
    settings: Settings,
    tmp_path: Path,
) -> None:
    from fastapi.testclient import TestClient

    from api.main import create_app

    # A season open while its events are accepted (a generous minute, for a loaded
    # machine); once they are, its end is moved to the next whole second (still
    # after every acceptance), and the close runs after that: no fixed wait.
    now = datetime.now(UTC).replace(microsecond=0)
    boards = tmp_path / "boards.yaml"

    def season_ending(close: datetime) -> None:
        boards.write_text(
            "regions: [eu, na]\n"
            "seasons:\n"
            f'  - {{id: SX, start: "{(now - timedelta(days=1)).isoformat()}", '
            f'end: "{close.isoformat()}", allowedLateness: "PT0S", '
            "tiers: [{name: champion, top: 1}, {name: top2, top: 2}]}\n"
        )

    season_ending(now + timedelta(seconds=60))
    settings = settings.model_copy(update={"boards_file": boards})
    occurred = (now - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        for player, points in {"c1": 5, "c2": 9, "c3": 9, "c4": 1}.items():
            reply = api.post(
                "/v1/score-events",
                event(
                    eventId=f"X-{player}",
                    playerId=player,
                    occurredAt=occurred,
                    result={"points": points},
                ),
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["status"] == "accepted", reply.text
    close = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    season_ending(close)
    while datetime.now(UTC) <= close:
        time.sleep(0.1)

    out = airflow.dags_test("season_close", settings, "-c", '{"season": "SX"}')
    assert "award snapshot of SX diverges" not in out

    with TestClient(create_app(settings)) as client:
        awards = client.get("/v1/boards/season:SX:global/awards").json()
    entries = [
        (e["rank"], e["playerId"], e["score"], e["tier"]) for e in awards["entries"]
    ]
    assert entries == [
        (1, "c2", 9, "champion"),
        (1, "c3", 9, "champion"),
        (3, "c1", 5, None),
        (4, "c4", 1, None),
    ]
