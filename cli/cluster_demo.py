"""`make cluster-demo` (``python -m cli.cluster_demo``): the whole service on its
distributed engines, on this machine, in one command.

It starts, each on loopback under one fresh directory:

1. a Spark standalone master with two workers (``jobs.spark_standalone``);
2. a Redis Cluster of three masters, AOF ``appendfsync always``
   (``speed.cluster_server``);
3. two API processes on that cluster and the same data dir: `lb up` (supervised)
   and a second uvicorn beside it, as two hosts behind a load balancer would run;
4. Airflow standalone (scheduler, DAG processor, triggerer, API server on SQLite)
   with ``dags/``, its tasks' Spark on the standalone master.

Then it plays a short season: signed events (with redeliveries) half through each
API, the live top read from both; a ``publish_generation`` run (the scheduler's
own, made when the DAG is unpaused) and a snapshot read; at the season's close
time a ``season_close`` run (final generation, award snapshot, the DAG's own
check against an offline recompute); the award snapshot read from both APIs and
compared with an offline sort of the events sent. It prints where each part runs,
then stops everything, also on failure or Ctrl-C. Exit 0 when every check held,
1 when one failed (the message says which), 6 when a part would not start.

    python -m cli.cluster_demo [--dir DIR] [--players 60] [--events 400]
                               [--season-seconds 120] [--timeout 1800]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from api.security import sign
from cli.supervisor import HTTP_PROTOCOL, api_command
from jobs.spark_standalone import StandaloneFailed, standalone_cluster
from speed.cluster_server import RedisClusterServer
from speed.server import RedisServerError, free_port

REPO = Path(__file__).resolve().parents[1]
SEASON = "CLUSTER"
BOARD = f"season:{SEASON}:global"
KEY_ID, SECRET = "demo", "cluster-demo-secret"
TIERS = [{"name": "champion", "top": 1}, {"name": "top10", "top": 10}]
EXIT_CHECK, EXIT_ENVIRONMENT = 1, 6


class DemoFailed(Exception):
    """A check of the demo did not hold."""


class PartFailed(Exception):
    """A part of the stack did not start."""


def log(message: str) -> None:
    print(f"{datetime.now(UTC):%H:%M:%S} {message}", flush=True)


def wait_for(what: str, check: Callable[[], bool], timeout: float, every=1.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise DemoFailed(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


# -- the season ---------------------------------------------------------------


def boards_file(path: Path, start: datetime, end: datetime) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "regions": ["eu", "na"],
                "seasons": [
                    {
                        "id": SEASON,
                        "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "end": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "allowedLateness": "PT0S",
                        "aggregation": "sum",
                        "tieBreak": "player_id",
                        "rule": "v1",
                        "tiers": TIERS,
                    }
                ],
            },
            sort_keys=False,
        )
    )
    return path


def season_events(players: int, count: int, at: datetime) -> list[dict[str, Any]]:
    """``count`` match results over ``players`` players, reproducible."""
    rng = random.Random(20261201)
    occurred = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {
            "eventId": f"cd-{i}",
            "playerId": f"player-{rng.randrange(players):03d}",
            "matchId": f"match-{i}",
            "sourceRevision": 1,
            "occurredAt": occurred,
            "region": rng.choice(["eu", "na"]),
            "result": {"points": rng.randrange(1, 100)},
        }
        for i in range(count)
    ]


def expected_ranking(events: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    """(rank, playerId, score) in display order: the offline sort of the events."""
    totals: dict[str, int] = {}
    for e in events:
        totals[e["playerId"]] = totals.get(e["playerId"], 0) + e["result"]["points"]
    ordered = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    return [
        (1 + sum(s > score for s in totals.values()), p, score) for p, score in ordered
    ]


# -- the parts ----------------------------------------------------------------


@dataclass
class Api:
    name: str
    url: str
    pid: int

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        reply = httpx.get(f"{self.url}{path}", params=params, timeout=30)
        if reply.status_code != 200:
            raise DemoFailed(
                f"{self.name} GET {path}: {reply.status_code} {reply.text}"
            )
        body: dict[str, Any] = reply.json()
        return body

    def post_batch(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = orjson.dumps({"events": events})
        reply = httpx.post(
            f"{self.url}/v1/score-events:batch",
            content=body,
            headers={
                "X-Key-Id": KEY_ID,
                "X-Signature": sign(SECRET.encode(), body),
                "Content-Type": "application/json",
            },
            timeout=60,
        )
        if reply.status_code != 200:
            raise DemoFailed(f"{self.name} batch: {reply.status_code} {reply.text}")
        results: list[dict[str, Any]] = reply.json()["results"]
        return results

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


def lb(*args: str, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise PartFailed(f"lb {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    return done.stdout


@contextmanager
def lb_up(env: dict[str, str], data_dir: Path) -> Iterator[Api]:
    port = free_port()
    lb("up", "--port", str(port), env=env)
    try:
        pid = int((data_dir / "run" / "api.pid").read_text())
        yield Api("api-1 (lb up)", f"http://127.0.0.1:{port}", pid)
    finally:
        subprocess.run(
            [sys.executable, "-m", "cli.main", "down"],
            env=env,
            cwd=REPO,
            capture_output=True,
            timeout=120,
            check=False,
        )


@contextmanager
def second_api(env: dict[str, str], root: Path) -> Iterator[Api]:
    """A second API process on the same cluster and data dir (another host's)."""
    port = free_port()
    metrics = root / "api-2-metrics"
    metrics.mkdir()
    with (root / "api-2.log").open("wb") as out:
        proc = subprocess.Popen(
            api_command("127.0.0.1", port, *HTTP_PROTOCOL),
            env={**env, "PROMETHEUS_MULTIPROC_DIR": str(metrics)},
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield Api("api-2 (uvicorn)", f"http://127.0.0.1:{port}", proc.pid)
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes], grace: float = 30) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def airflow_venv() -> Path:
    venv = Path(os.environ.get("LB_AIRFLOW_VENV", REPO / ".venv-airflow"))
    if not (venv / "bin" / "airflow").exists():
        raise PartFailed(f"Airflow is not installed in {venv}: run `make airflow-venv`")
    return venv


class Airflow:
    """Airflow standalone with ``dags/`` and its CLI, one AIRFLOW_HOME."""

    def __init__(self, home: Path, lb_env: dict[str, str]) -> None:
        self.home = home
        self.venv = airflow_venv()
        self.port = free_port()
        home.mkdir(parents=True)
        self.env = {
            **lb_env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__API__PORT": str(self.port),
            # Task processes report to the API server's execution API: on its port
            # (the default URL names port 8080).
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": (
                f"http://127.0.0.1:{self.port}/execution/"
            ),
            # The tasks import this checkout's packages, whatever the venv points at.
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
            ),
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @contextmanager
    def running(self, timeout: float) -> Iterator[Airflow]:
        with (self.home / "standalone.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [str(self.venv / "bin" / "airflow"), "standalone"],
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_for("Airflow standalone healthy", self.healthy, timeout, every=3)
            yield self
        finally:
            _stop_group(self.proc, grace=60)

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise PartFailed(
                f"airflow standalone exited ({self.proc.returncode}); see "
                f"{self.home / 'standalone.log'}"
            )
        try:
            reply = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5)
        except httpx.HTTPError:
            return False
        if reply.status_code != 200:
            return False
        parts = reply.json()
        return all(
            parts.get(name, {}).get("status") == "healthy"
            for name in ("metadatabase", "scheduler", "dag_processor")
        )

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.venv / "bin" / "airflow"), *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise DemoFailed(f"airflow {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return _json_rows(self.cli("dags", "list-runs", dag_id, "-o", "json"))

    def parsed(self, *dag_ids: str) -> bool:
        listed = {
            d["dag_id"] for d in _json_rows(self.cli("dags", "list", "-o", "json"))
        }
        return set(dag_ids) <= listed

    def wait_run(self, dag_id: str, run_id: str | None, timeout: float) -> str:
        """Until the run (``None``: any run of the DAG, the scheduler's) succeeded;
        its id. A failed run fails the demo."""
        succeeded: list[str] = []

        def done() -> bool:
            for run in self.runs(dag_id):
                if run_id is not None and run["run_id"] != run_id:
                    continue
                if run["state"] == "failed":
                    raise DemoFailed(
                        f"{dag_id} run {run['run_id']} failed; task logs under "
                        f"{self.home / 'logs'}"
                    )
                if run["state"] == "success":
                    succeeded.append(str(run["run_id"]))
            return bool(succeeded)

        wait_for(f"{dag_id} run {run_id or '(scheduled)'}", done, timeout, every=10)
        return succeeded[0]


def _json_rows(out: str) -> list[dict[str, Any]]:
    """The JSON list an ``airflow ... -o json`` command printed: its own line, after
    any warnings Airflow logs to stdout first."""
    for line in reversed(out.splitlines()):
        if line.startswith("["):
            rows: list[dict[str, Any]] = json.loads(line)
            return rows
    return []


# -- the demo -----------------------------------------------------------------


def lb_env(root: Path, redis_url: str, boards: Path) -> dict[str, str]:
    """The LB_* environment of every part: one data dir, the cluster, the season."""
    return {
        **os.environ,
        "LB_DATA_DIR": str(root / "lb"),
        "LB_REDIS_URL": redis_url,
        "LB_SPARK_DRIVER_MEMORY": "1g",
        "LB_BOARDS_FILE": str(boards),
        "LB_HMAC_KEYS": f"{KEY_ID}:{SECRET}",
        "LB_PARTITIONS": "6",
        "LB_RATE_LIMIT": "off",
        "LB_API_WORKERS": "1",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        ),
        "PYTHONWARNINGS": "ignore",
    }


def send(apis: list[Api], events: list[dict[str, Any]]) -> int:
    """Events in batches of 100, alternating between the APIs, then every tenth
    event again through the other API: a redelivery must answer ``duplicate``."""
    for i in range(0, len(events), 100):
        results = apis[(i // 100) % len(apis)].post_batch(events[i : i + 100])
        refused = [r for r in results if r.get("status") != "accepted"]
        if refused:
            raise DemoFailed(f"events not accepted: {refused[:3]}")
    again = events[::10]
    for i in range(0, len(again), 100):
        results = apis[1 - (i // 100) % len(apis)].post_batch(again[i : i + 100])
        if any(r.get("status") != "duplicate" for r in results):
            raise DemoFailed(f"a redelivery was not a duplicate: {results[:3]}")
    return len(again)


def ranking_of(entries: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    return [(e["rank"], e["playerId"], e["score"]) for e in entries]


def read_all(api: Api, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every entry of a paged read (``entries`` or ``awards``), following cursors."""
    entries: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = api.get(path, limit=100, **({"cursor": cursor} if cursor else params))
        entries += page["entries"]
        cursor = (page.get("cursors") or {}).get("after")
        if not cursor:
            return entries


def play(args: argparse.Namespace, root: Path) -> None:
    where: list[tuple[str, str]] = [("data", str(root))]
    with ExitStack() as stack:
        log("starting a Redis Cluster of three masters ...")
        redis = RedisClusterServer(root / "redis", masters=3).start()
        stack.callback(redis.stop)
        where += [
            (f"redis master {i}", f"127.0.0.1:{node.port}")
            for i, node in enumerate(redis.nodes)
        ]
        # The season opens an hour ago and ends --season-seconds from now: the
        # events are sent right after the APIs start, long before its close.
        started = datetime.now(UTC).replace(microsecond=0)
        season_end = started + timedelta(seconds=args.season_seconds)
        boards = boards_file(
            root / "boards.yaml", started - timedelta(hours=1), season_end
        )
        events = season_events(
            args.players, args.events, started - timedelta(minutes=5)
        )
        expected = expected_ranking(events)
        env = lb_env(root, redis.url, boards)
        log("starting two API processes on the cluster ...")
        api_1 = stack.enter_context(lb_up(env, root / "lb"))
        api_2 = stack.enter_context(second_api(env, root))
        wait_for("api-2 ready", api_2.ready, 120)
        apis = [api_1, api_2]
        where += [(api.name, f"{api.url}  (pid {api.pid})") for api in apis]

        redelivered = send(apis, events)
        if datetime.now(UTC) >= season_end:
            raise DemoFailed(
                f"the events were sent after the season's end ({season_end:%H:%M:%S}); "
                "rerun with a larger --season-seconds"
            )
        log(
            f"sent {len(events)} events half through each API, "
            f"{redelivered} redelivered"
        )
        for api in apis:
            top = api.get(f"/v1/boards/{BOARD}/top", limit=1000)
            if ranking_of(top["entries"]) != expected:
                raise DemoFailed(f"{api.name}: live top differs from the offline sort")
        log(
            f"live top of {BOARD} from both APIs equals the offline sort "
            f"({len(expected)} players)"
        )

        log("starting Spark standalone: a master and two workers ...")
        spark = stack.enter_context(
            standalone_cluster(root / "spark", workers=2, cores=1, memory="1g")
        )
        where += [
            ("spark master", f"{spark.master_url}  (UI {spark.master_ui})"),
            *[
                (name, f"pid {pid}")
                for name, pid in spark.pids.items()
                if name != "master"
            ],
        ]
        log("starting Airflow standalone (its tasks' Spark: the standalone master) ...")
        # One scheduled publish (the one unpausing makes), not one every 5 minutes
        # competing with the season's close for the two cores.
        jobs_env = {
            **spark.env,
            **env,
            "LB_SPARK_MASTER": spark.master_url,
            "LB_PUBLISH_EVERY_MINUTES": "240",
        }
        airflow = stack.enter_context(
            Airflow(root / "airflow", jobs_env).running(args.timeout)
        )
        where.append(
            ("airflow", f"{airflow.url}  (scheduler, dag processor, triggerer)")
        )
        wait_for(
            "the DAGs parsed",
            lambda: airflow.parsed("publish_generation", "season_close"),
            args.timeout,
            every=5,
        )
        airflow.cli("dags", "unpause", "publish_generation")
        log("publish_generation unpaused: waiting for the scheduler's run ...")
        run = airflow.wait_run("publish_generation", None, args.timeout)
        snapshot = api_2.get(f"/v1/boards/{BOARD}/top", limit=1000, mode="snapshot")
        log(
            f"publish_generation {run}: success; api-2 serves generation "
            f"{snapshot['generation']['id']}"
        )
        if ranking_of(snapshot["entries"]) != expected:
            raise DemoFailed("the published generation differs from the offline sort")

        wait_for(
            f"the season's close time ({season_end:%H:%M:%S})",
            lambda: datetime.now(UTC) > season_end,
            args.season_seconds + 60,
        )
        run_id = f"cluster-demo-close-{int(time.time())}"
        airflow.cli("dags", "unpause", "season_close")
        airflow.cli(
            "dags",
            "trigger",
            "season_close",
            "--run-id",
            run_id,
            "--conf",
            json.dumps({"season": SEASON}),
        )
        log(f"season_close {run_id} triggered: waiting ...")
        airflow.wait_run("season_close", run_id, args.timeout)
        for api in apis:
            awards = read_all(api, f"/v1/boards/{BOARD}/awards")
            if ranking_of(awards) != expected:
                raise DemoFailed(
                    f"{api.name}: the award snapshot differs from the offline sort"
                )
        champion = read_all(api_1, f"/v1/boards/{BOARD}/awards")[0]
        if champion["tier"] != "champion":
            raise DemoFailed(f"rank 1 has tier {champion['tier']!r}, not 'champion'")
        log(
            f"season_close {run_id}: success; the award snapshot from both APIs equals "
            f"the offline sort (champion {champion['playerId']}, "
            f"{champion['score']} points)"
        )
        print("\nwhere each part ran:")
        for name, place in where:
            print(f"  {name:<22} {place}")
        log("stopping everything ...")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cli.cluster_demo", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--dir", type=Path, help="work dir (default $LB_DATA_DIR/cluster-demo)"
    )
    parser.add_argument("--players", type=int, default=60)
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--season-seconds", type=int, default=120)
    parser.add_argument("--timeout", type=float, default=1800, help="per waiting step")
    args = parser.parse_args(argv)
    root = (
        args.dir or Path(os.environ.get("LB_DATA_DIR", ".lb")) / "cluster-demo"
    ).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    try:
        play(args, root)
    except DemoFailed as exc:
        print(f"cluster demo FAILED: {exc}", file=sys.stderr)
        return EXIT_CHECK
    except (PartFailed, StandaloneFailed, RedisServerError) as exc:
        print(f"cluster demo could not start a part: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    print("cluster demo OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
