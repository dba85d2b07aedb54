"""The tests' fixtures, all in one place: a real redis-server (and a Redis Cluster)
per session, the settings and the signed client of an in-process API, the one
SparkSession (and a standalone Spark cluster) per session. Helpers that are not
fixtures live in ``tests/support/``; the names re-exported below keep the older
``from tests.conftest import SignedClient, event, ...`` working."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from api.main import create_app
from conf.settings import Settings
from jobs.jars import JarsMissing
from speed.cluster_server import RedisClusterServer
from speed.connection import sync_client
from speed.server import RedisServer
from tests.support.client_stack import ClientStack
from tests.support.clients import DEV_SECRET, SignedClient, event
from tests.support.isolation import SharedState, check_spark_running, ran
from tests.support.redis_servers import start_own
from tests.support.settings import (
    BACKENDS,
    OPEN_DAYS,
    OPEN_LATENESS,
    OPEN_WINDOWS_BOARDS,
    base_settings,
    open_windows_env,
    settings_boards,
)
from tests.support.spark import Cluster, start_cluster, start_spark

pytest_plugins = ["tests.support.markers", "tests.support.groups", "pytester"]

__all__ = [  # re-exported for test modules written against tests.conftest
    "BACKENDS",
    "DEV_SECRET",
    "OPEN_DAYS",
    "OPEN_LATENESS",
    "OPEN_WINDOWS_BOARDS",
    "SignedClient",
    "event",
    "open_windows_env",
    "settings_boards",
]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_own(
        lambda path: RedisServer(path, appendfsync="always"),
        tmp_path_factory.mktemp("redis"),
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis Cluster of three masters on loopback, for the tests that run the
    speed layer on a cluster as well as on one server (``redis_backend``): its URL
    (``redis+cluster://...``), AOF with fsync always on every master like the
    single server. Started on first use, stopped at the end of the session."""
    cluster = start_own(
        lambda path: RedisClusterServer(path, masters=3, appendfsync="always"),
        tmp_path_factory.mktemp("redis-cluster"),
    )
    yield cluster.url
    cluster.stop()


# A replica takes over 1 s after its master stopped answering (the default 5 s
# would make every failover test wait that long), and always may: a replica that
# was stopped meanwhile still counts as a candidate (validity factor 0).
FAILOVER_NODE_TIMEOUT_MS = 1000
FAILOVER_EXTRA = ("--cluster-replica-validity-factor", "0")


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[RedisClusterServer]:
    """A cluster of three masters with one replica each, for one test (failover
    tests kill its nodes); stopped at the end of the test."""
    # Twelve ports (a client and a bus port per node), each released by
    # ``free_port`` before its node binds it: started through ``start_own`` so that
    # one taken meanwhile by another worker's process means a new try, not an error.
    cluster = start_own(
        lambda path: RedisClusterServer(
            path,
            masters=3,
            replicas=1,
            appendfsync="always",
            node_timeout_ms=FAILOVER_NODE_TIMEOUT_MS,
            extra=FAILOVER_EXTRA,
        ),
        tmp_path / "redis-cluster",
    )
    yield cluster
    cluster.stop(kill=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one SparkSession (with Delta) of the test session, shared by every test
    needing Spark, and by the jobs they call in-process (``get_spark`` returns the
    active session). Its warehouse is a directory of its own (not ``./spark-warehouse``
    of whatever the working directory is); ``shared_state_guard`` checks before
    every test that the session is still running."""
    try:
        session = start_spark(tmp_path_factory.mktemp("spark-warehouse"))
    except JarsMissing as exc:
        pytest.fail(str(exc))
    yield session
    # A test interrupted inside a Py4J call (pytest-timeout on a loaded machine)
    # can leave the gateway broken; its tests have failed already, and a stop
    # that raises here would replace the run's summary with this traceback.
    with contextlib.suppress(Py4JError):
        session.stop()


@pytest.fixture(autouse=True)
def shared_state_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """The state that the tests of one worker share (tests/support/isolation.py):
    a test that uses the session's SparkSession finds it running and its Py4J
    connection in step (repaired after a test that timed out inside a call); a
    test that leaves the working directory or an ``LB_*`` variable changed fails,
    and the change is undone so that the tests after it are not redirected."""
    if "spark" in request.fixturenames:
        check_spark_running(request.getfixturevalue("spark"), request.node.nodeid)
    before = SharedState.capture()
    yield
    ran(request.node.nodeid)
    left = before.restore()
    if left:
        pytest.fail(f"{request.node.nodeid} left shared state changed: {left}")


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "single"))


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_backend: str) -> str:
    """LB_REDIS_URL of the backend: the session's single server, or the session's
    three-master cluster (``redis+cluster://``), started on first use."""
    if redis_backend == "cluster":
        return str(request.getfixturevalue("redis_cluster"))
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = sync_client(redis_url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def settings(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Settings:
    """Settings of an in-process API on the (flushed) test Redis: see
    ``tests.support.settings.base_settings``."""
    return base_settings(redis_url, tmp_path)


@pytest.fixture
def api(settings: Settings) -> Iterator[SignedClient]:
    with TestClient(create_app(settings)) as client:
        yield SignedClient(client)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A Spark standalone cluster on loopback (a master and one worker with two
    executors), stopped after the tests."""
    with start_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def client_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientStack]:
    """One ``lb up`` stack with seed events and a generation of them, shared by the
    client libraries' tests (tests/clients: Python, and TypeScript under node)."""
    stack = ClientStack(tmp_path_factory.mktemp("clients") / "lb")
    stack.up()
    try:
        stack.seed()
        yield stack
    finally:
        stack.down()
