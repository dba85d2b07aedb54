"""A Redis Cluster of three masters on loopback for the tests that run the speed
layer on a cluster as well as on one server (``redis_backend`` in conftest)."""

from __future__ import annotations

from collections.abc import Iterator

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
