"""A local Redis Cluster: N masters on loopback (and R replicas of each), each a
``redis-server`` like :class:`speed.server.RedisServer` (AOF, ``appendfsync`` as
given) with ``--cluster-enabled yes``, joined with ``redis-cli --cluster create``.

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
    """One node of the local cluster (its own data dir and nodes.conf); ``extra``
    are more ``redis-server`` arguments (e.g. ``--repl-timeout 1``)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        appendfsync: str = "always",
        node_timeout_ms: int = CLUSTER_NODE_TIMEOUT_MS,
        extra: tuple[str, ...] = (),
    ) -> None:
        super().__init__(data_dir, appendfsync=appendfsync)
        # The cluster bus defaults to port + 10000, out of range for the high ports
        # the OS hands out: give it a free port of its own.
        self.bus_port = free_port()
        self.node_timeout_ms = node_timeout_ms
        self.extra = extra

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
            str(self.node_timeout_ms),
            *self.extra,
        ]


class RedisClusterServer:
    """``masters`` cluster nodes under ``data_dir/node<i>``, and ``replicas`` replicas
    of each (``redis-cli --cluster create --cluster-replicas``: the first
    ``masters`` nodes become the masters). ``node_timeout_ms`` is
    ``cluster-node-timeout``: how long a master may be unreachable before its
    replica takes over."""

    def __init__(
        self,
        data_dir: Path,
        *,
        masters: int = 3,
        replicas: int = 0,
        appendfsync: str = "always",
        node_timeout_ms: int = CLUSTER_NODE_TIMEOUT_MS,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.replicas = replicas
        self.nodes = [
            ClusterNode(
                self.data_dir / f"node{i}",
                appendfsync=appendfsync,
                node_timeout_ms=node_timeout_ms,
                extra=extra,
            )
            for i in range(masters * (1 + replicas))
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
            + ["--cluster-replicas", str(self.replicas), "--cluster-yes"],
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
        """Until every running node reports ``cluster_state:ok`` and knows every
        node, and every replica's link to its master is up: a client that starts
        from any node then sees the whole slot map."""
        deadline = time.monotonic() + timeout
        while True:
            running = [n for n in self.nodes if n.process is not None]
            states = [self._state(n) for n in running]
            if all(
                s.get("cluster_state") == "ok"
                and int(s.get("cluster_known_nodes", 0)) == len(self.nodes)
                for s in states
            ) and all(self._replica_synced(n) for n in running):
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

    @staticmethod
    def _replication(node: RedisServer) -> dict[str, str]:
        client = redis.Redis.from_url(node.url, socket_timeout=2)
        try:
            info = client.info("replication")
        finally:
            client.close()
        return {str(k): str(v) for k, v in info.items()}

    def _replica_synced(self, node: RedisServer) -> bool:
        """A master, or a replica whose link to its master is up."""
        info = self._replication(node)
        return info.get("role") != "slave" or info.get("master_link_status") == "up"

    def master_of_key(self, key: str) -> ClusterNode:
        """The running node that serves ``key``'s slot as a master now."""
        for node in self.nodes:
            if node.process is None:
                continue
            client = redis.Redis.from_url(node.url, socket_timeout=2)
            try:
                slot = int(client.execute_command("CLUSTER KEYSLOT", key))
                shards = client.execute_command("CLUSTER SLOTS")
            finally:
                client.close()
            for start, end, master, *_ in shards:
                if int(start) <= slot <= int(end):
                    return self._node_at(int(master[1]))
        raise RedisServerError(f"no running master serves {key!r}")

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        """The running nodes that replicate ``master``."""
        found = []
        for node in self.nodes:
            if node.process is None or node is master:
                continue
            info = self._replication(node)
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == (
                master.port
            ):
                found.append(node)
        return found

    def _node_at(self, port: int) -> ClusterNode:
        for node in self.nodes:
            if node.port == port:
                return node
        raise RedisServerError(f"no node of this cluster listens on {port}")

    def stop(self, kill: bool = False) -> None:
        for node in self.nodes:
            node.stop(kill=kill)
