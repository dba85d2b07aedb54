"""`lb up` with LB_REDIS_URL naming a Redis Cluster (``redis+cluster://``): the API
serves writes and exact reads from the cluster, `lb status` reads it, and `lb down`
stops only the API (the cluster is not the stack's to stop)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import orjson
import pytest

from api.security import sign
from speed.connection import sync_client
from speed.partitions import Keys, partition_of
from speed.server import free_port
from tests.conftest import event, open_windows_env
from tests.support.lb import lb, running

pytestmark = pytest.mark.e2e


def test_up_on_a_cluster_serves_writes_and_reads(
    tmp_path: Path, redis_cluster: str
) -> None:
    client = sync_client(redis_cluster)
    client.flushall()
    env = dict(
        os.environ,
        LB_DATA_DIR=str(tmp_path / "lb"),
        LB_REDIS_URL=redis_cluster,
        LB_PARTITIONS="8",
        LB_RATE_LIMIT="off",
    )
    env |= open_windows_env(tmp_path / "conf")  # event() is dated November 2026
    port = free_port()
    started = lb("up", "--port", str(port), env=env)
    assert started.returncode == 0, started.stderr
    run = tmp_path / "lb" / "run"
    assert not (run / "redis.pid").exists()  # the cluster is LB_REDIS_URL's
    api_pid = int((run / "api.pid").read_text())
    base = f"http://127.0.0.1:{port}"
    try:
        players = [f"p{i}" for i in range(12)]
        for i, player in enumerate(players):
            body = orjson.dumps(
                event(eventId=f"e{i}", playerId=player, result={"points": 10 + i})
            )
            reply = httpx.post(
                f"{base}/v1/score-events",
                content=body,
                headers={"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", body)},
            )
            assert reply.status_code == 200, reply.text
        # The twelve players' partitions live on more than one master.
        nodes = {
            client.get_node_from_key(  # type: ignore[attr-defined]
                Keys(partition_of(p, 8)).log
            ).name
            for p in players
        }
        assert len(nodes) > 1
        top = httpx.get(f"{base}/v1/boards/season:S4:global/top?limit=5").json()
        assert (top["exactness"], top["basis"]) == ("exact", "live")
        ids = [e["playerId"] for e in top["entries"]]
        assert ids == ["p11", "p10", "p9", "p8", "p7"]
        assert top["population"] == 12
        me = httpx.get(f"{base}/v1/boards/season:S4:global/players/p3").json()
        assert (me["score"], me["rank"]) == (13, 9)
        status = lb("status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["stack"]["redis"].endswith(": up")
    finally:
        stopped = lb("down", env=env)
        client.close()
    assert stopped.returncode == 0, stopped.stderr
    assert not running(api_pid)
