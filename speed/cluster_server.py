"""A local Redis Cluster: N masters on loopback, each a ``redis-server`` like
:class:`speed.server.RedisServer` (AOF, ``appendfsync`` as given) with
``--cluster-enabled yes``, joined with ``redis-cli --cluster create``.

For tests and small benchmarks of the speed layer on a cluster; production clusters
are run by their operator and named by ``LB_REDIS_URL=redis+cluster://host:port``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from speed.server import RedisServer, RedisServerError, free_port

CLUSTER_NODE_TIMEOUT_MS = 5000


class ClusterNode(RedisServer):
    """One master of the local cluster (its own data dir and nodes.conf)."""

    def __init__(self, data_dir: Path, *, appendfsync: str = "always") -> None:
        super().__init__(data_dir, appendfsync=appendfsync)
        # The cluster bus defaults to port + 10000, out of range for the high ports
        # the OS hands out: give it a free port of its own.
        self.bus_port = free_port()

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            str(self.bus_port),
            "--cluster-config-file",
            str((self.data_dir / "nodes.conf").resolve()),
            "--cluster-node-timeout",
            str(CLUSTER_NODE_TIMEOUT_MS),
        ]


class RedisClusterServer:
    """``masters`` cluster nodes under ``data_dir/node<i>``; no replicas."""

    def __init__(
        self, data_dir: Path, *, masters: int = 3, appendfsync: str = "always"
    ) -> None:
        self.data_dir = Path(data_dir)
        self.nodes = [
            ClusterNode(self.data_dir / f"node{i}", appendfsync=appendfsync)
            for i in range(masters)
        ]

    @property
    def url(self) -> str:
        """The URL the service takes (LB_REDIS_URL): any node, cluster scheme."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self, timeout: float = 30.0) -> RedisClusterServer:
        try:
            for node in self.nodes:
                node.start()
            self._create(timeout)
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self, timeout: float) -> None:
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        done = subprocess.run(
            [cli, "--cluster", "create", *addresses]
            + ["--cluster-replicas", "0", "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RedisServerError(
                f"redis-cli --cluster create failed ({done.returncode}): "
                f"{done.stdout[-500:]} {done.stderr[-500:]}"
            )

    def wait_ok(self, timeout: float) -> None:
        """Until every node reports ``cluster_state:ok`` and knows every master:
        a client that starts from any node then sees the whole slot map."""
        deadline = time.monotonic() + timeout
        while True:
            states = [self._state(n) for n in self.nodes]
            if all(
                s.get("cluster_state") == "ok"
                and int(s.get("cluster_known_nodes", 0)) == len(self.nodes)
                for s in states
            ):
                return
            if time.monotonic() > deadline:
                raise RedisServerError(f"cluster not ok within {timeout} s: {states}")
            time.sleep(0.1)

    @staticmethod
    def _state(node: RedisServer) -> dict[str, str]:
        client = redis.Redis.from_url(node.url, socket_timeout=2)
        try:
            text = client.execute_command("CLUSTER INFO")
        finally:
            client.close()
        if isinstance(text, bytes):
            text = text.decode()
        if isinstance(text, dict):  # redis-py may parse the reply already
            return {str(k): str(v) for k, v in text.items()}
        return dict(
            line.split(":", 1) for line in str(text).splitlines() if ":" in line
        )

    def stop(self, kill: bool = False) -> None:
        for node in self.nodes:
            node.stop(kill=kill)
