"""A Redis Cluster of three masters on loopback for the tests that run the speed
layer on a cluster as well as on one server (``redis_backend`` in conftest), and
one with a replica per master for the failover tests (``replicated_cluster``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from speed.cluster_server import RedisClusterServer


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The cluster's URL (``redis+cluster://...``); AOF with fsync always on every
    master, like the single test server. Stopped at the end of the session."""
    cluster = RedisClusterServer(
        tmp_path_factory.mktemp("redis-cluster"), masters=3, appendfsync="always"
    ).start()
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
    cluster = RedisClusterServer(
        tmp_path / "redis-cluster",
        masters=3,
        replicas=1,
        appendfsync="always",
        node_timeout_ms=FAILOVER_NODE_TIMEOUT_MS,
        extra=FAILOVER_EXTRA,
    ).start()
    yield cluster
    cluster.stop(kill=True)
