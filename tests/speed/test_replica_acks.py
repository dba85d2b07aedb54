"""LB_REPLICA_ACKS: an event is acknowledged only after N replicas have it (Redis
WAIT on the master that ran its owner transaction), so a failover to a replica
loses no acknowledged event; fewer replicas in time answer 503 (outcome unknown).

The failover test makes the replica lag for certain: it is stopped (SIGSTOP) and
its master drops the link before the writes, then the master is killed (kill -9)
and the replica resumed and promoted. With N=0 the writes made meanwhile are
acknowledged and lost (the failure mode); with N=1 they answer 503 and every
acknowledged event survives the failover.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from api.routes.score_events import validate_event
from conf.boards import load_boards
from conf.rules import default_registry
from conf.settings import Settings
from speed.cluster_server import ClusterNode, RedisClusterServer
from speed.connection import ReplicasNotAcknowledged, async_client
from speed.partitions import Keys, partition_of
from speed.store import Outcome, SpeedLayer
from tests.conftest import OPEN_DAYS, SignedClient, event, settings_boards
from tests.support.redis_servers import own_server

pytestmark = pytest.mark.integration

PARTITIONS = 4
BOARD = "alltime:all:global"


def _settings(url: str, tmp_path: Path, acks: int, timeout_ms: int) -> Settings:
    return Settings(
        redis_url=url,
        data_dir=tmp_path / "lb",
        partitions=PARTITIONS,
        rate_limit="off",
        boards_file=settings_boards(tmp_path),
        dedupe_window=timedelta(days=OPEN_DAYS),
        replica_acks=acks,
        replica_ack_timeout_ms=timeout_ms,
    )


def _players(partition: int, count: int) -> list[str]:
    found: list[str] = []
    i = 0
    while len(found) < count:
        name = f"R{i}"
        if partition_of(name, PARTITIONS) == partition:
            found.append(name)
        i += 1
    return found


def _post(api: SignedClient, body: dict[str, Any]) -> Any:
    return api.post("/v1/score-events", body)


def _until(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def _info(node: ClusterNode, section: str) -> dict[str, Any]:
    client = redis.Redis.from_url(node.url, socket_timeout=2)
    try:
        return dict(client.info(section))
    finally:
        client.close()


def _stored_total(node: ClusterNode, partition: int, player: str) -> int:
    client = redis.Redis.from_url(node.url, decode_responses=True, socket_timeout=2)
    try:
        raw = client.hget(Keys(partition).totals(BOARD), player)
    finally:
        client.close()
    return int(str(raw).split("|")[0]) if raw is not None else 0


def _promoted(replica: ClusterNode) -> bool:
    """The replica is a master now and its cluster serves every slot again."""
    try:
        if _info(replica, "replication").get("role") != "master":
            return False
        client = redis.Redis.from_url(replica.url, socket_timeout=2)
        try:
            text = client.execute_command("CLUSTER INFO")
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False
    if isinstance(text, bytes):
        text = text.decode()
    return "cluster_state:ok" in str(text) or (
        isinstance(text, dict) and text.get("cluster_state") == "ok"
    )


# N=1 is the regression test (make test); N=0 shows the loss it prevents (SLOW=1).
@pytest.mark.parametrize("acks", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_failover_loses_no_acknowledged_event_with_replica_acks(
    replicated_cluster: RedisClusterServer, tmp_path: Path, acks: int
) -> None:
    cluster = replicated_cluster
    victim = cluster.master_of_key(Keys(0).position)
    (replica,) = cluster.replicas_of(victim)
    settings = _settings(cluster.url, tmp_path, acks, timeout_ms=300)
    players = [p for part in range(PARTITIONS) for p in _players(part, 3)]
    lagged = _players(0, 3)  # on the victim master
    acknowledged: dict[str, dict[str, Any]] = {}  # eventId -> body sent
    unknown: dict[str, dict[str, Any]] = {}  # answered 503
    totals: dict[str, int] = {}  # player -> last acknowledged total
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)

        def send(body: dict[str, Any]) -> int:
            reply = _post(api, body)
            if reply.status_code == 200:
                acknowledged[body["eventId"]] = body
                boards = {b["board"]: b["total"] for b in reply.json()["boards"]}
                totals[body["playerId"]] = boards[BOARD]
            else:
                assert reply.status_code == 503, reply.text
                assert reply.json()["error"] == "unavailable"
                unknown[body["eventId"]] = body
            return int(reply.status_code)

        # Replicas in sync: every write is acknowledged.
        for i in range(60):
            player = players[i % len(players)]
            body = event(
                eventId=f"A{i}",
                playerId=player,
                matchId=f"MA{i}",
                result={"points": 1 + i % 7},
            )
            assert send(body) == 200
        # The replica stops and its master drops the link: nothing written from now
        # on reaches it (nothing is left in its socket buffers either).
        os.kill(replica.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            master = redis.Redis.from_url(victim.url, socket_timeout=2)
            master.client_kill_filter(_type="replica")
            _until(
                "the master counts no replica",
                lambda: int(_info(victim, "replication")["connected_slaves"]) == 0,
            )
            master.close()
            statuses = [
                send(
                    event(
                        eventId=f"B{i}",
                        playerId=lagged[i % 3],
                        matchId=f"MB{i}",
                        result={"points": 10 + i},
                    )
                )
                for i in range(9)
            ]
            # The master ran them; a failover now would lose them.
            assert sum(_stored_total(victim, 0, p) for p in lagged) == sum(
                10 + i for i in range(9)
            ) + sum(
                b["result"]["points"]
                for b in acknowledged.values()
                if b["playerId"] in lagged and b["eventId"].startswith("A")
            )
            victim.stop(kill=True)
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        assert statuses == ([503] * 9 if acks else [200] * 9)
        _until("the replica took over", lambda: _promoted(replica), timeout=60)

        # Every acknowledged event's total is on the new master, before any
        # redelivery: the stored total is the last one acknowledged.
        lost = {p for p in lagged if _stored_total(replica, 0, p) != totals[p]}
        if acks:
            # The new master has no replica yet: its writes cannot be acknowledged.
            for _ in range(50):
                reply = _post(api, event(eventId="C0", playerId=lagged[0]))
                if "ReplicasNotAcknowledged" in reply.text:
                    break
                time.sleep(0.2)
            assert reply.status_code == 503
            assert "0 of 1 replicas" in reply.json()["reason"]
            unknown["C0"] = event(eventId="C0", playerId=lagged[0])
        # The old master restarts on its own AOF and rejoins as the new master's
        # replica (resynced from it: the writes only it had are dropped).
        victim.start()
        _until(
            "the old master replicates the new one",
            lambda: (
                cluster.replicas_of(replica) == [victim]
                and _info(victim, "replication").get("master_link_status") == "up"
            ),
            timeout=60,
        )
        redelivered: dict[str, str] = {}
        for event_id, body in {**acknowledged, **unknown}.items():
            for _ in range(50):  # until the API's client sees the new topology
                reply = _post(api, body)
                if reply.status_code != 503:
                    break
                time.sleep(0.2)
            assert reply.status_code == 200, reply.text
            redelivered[event_id] = reply.json()["status"]
    lost_events = sorted(e for e in acknowledged if redelivered[e] != "duplicate")
    if acks == 0:
        # The failure mode LB_REPLICA_ACKS closes: acknowledged, then lost.
        assert lost == set(lagged)
        assert lost_events == sorted(f"B{i}" for i in range(9))
    else:
        assert lost == set()
        assert lost_events == []
        # The events answered 503 were lost with the master; redelivering them
        # applied them once.
        assert {redelivered[e] for e in unknown} == {"accepted"}
        assert sum(_stored_total(replica, 0, p) for p in lagged) == sum(
            b["result"]["points"]
            for b in {**acknowledged, **unknown}.values()
            if b["playerId"] in lagged
        )


def _wait_calls(node: ClusterNode) -> int:
    stats = _info(node, "commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def test_a_batch_sends_one_wait_per_master(
    replicated_cluster: RedisClusterServer, tmp_path: Path
) -> None:
    cluster = replicated_cluster
    nodes = [cluster.master_of_key(Keys(p).position) for p in range(PARTITIONS)]
    masters = {node.port: node for node in nodes}
    settings = _settings(cluster.url, tmp_path, acks=1, timeout_ms=2000)
    players = [p for part in range(PARTITIONS) for p in _players(part, 5)]
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        # Loads the script on every master (a fresh server answers NOSCRIPT once).
        assert _post(api, event(eventId="W-warm", matchId="MW-warm")).status_code == 200
        before = {port: _wait_calls(node) for port, node in masters.items()}
        batch = [
            event(eventId=f"W{i}", playerId=p, matchId=f"MW{i}")
            for i, p in enumerate(players * 4)
        ]
        reply = api.post("/v1/score-events:batch", {"events": batch})
        assert reply.status_code == 200, reply.text
        assert {r["status"] for r in reply.json()["results"]} == {"accepted"}
    after = {port: _wait_calls(node) for port, node in masters.items()}
    # 80 events over every partition's master: one WAIT each, not one per event.
    waits = {port: after[port] - before[port] for port in masters}
    assert waits == dict.fromkeys(masters, 1)


def test_one_server_without_replicas_answers_503_not_an_acknowledgement(
    tmp_path: Path,
) -> None:
    server = own_server(tmp_path / "redis")
    try:
        plain = _settings(server.url, tmp_path, acks=0, timeout_ms=50)
        with TestClient(create_app(plain)) as client:
            first = _post(SignedClient(client), event(eventId="S0", matchId="MS0"))
        assert first.status_code == 200
        waiting = _settings(server.url, tmp_path, acks=1, timeout_ms=50)
        with TestClient(create_app(waiting)) as client:
            reply = _post(SignedClient(client), event(eventId="S1", matchId="MS1"))
        assert reply.status_code == 503
        body = reply.json()
        assert body["error"] == "unavailable"
        assert "ReplicasNotAcknowledged" in body["reason"]
        assert "0 of 1 replicas" in body["reason"]
        # Applied on the master all the same: redelivery with N=0 is a duplicate.
        with TestClient(create_app(plain)) as client:
            again = _post(SignedClient(client), event(eventId="S1", matchId="MS1"))
        assert again.status_code == 200
        assert again.json()["status"] == "duplicate"
    finally:
        server.stop()


async def _redeliver(settings: Settings, body: dict[str, Any]) -> list[Outcome]:
    boards = load_boards(settings.boards_file)
    rules = default_registry()
    normalized = validate_event(body, settings, boards, datetime.now(UTC), rules)
    client = async_client(str(settings.redis_url))
    try:
        speed = SpeedLayer(
            client, boards, PARTITIONS, settings.record_ttl_seconds, None, rules
        )
        speed.replica_wait = (settings.replica_acks, settings.replica_ack_timeout_ms)
        return await speed.apply([normalized])
    finally:
        await client.aclose()


def test_a_duplicate_is_acknowledged_only_once_the_replica_has_it(
    tmp_path: Path,
) -> None:
    """A redelivery answered ``duplicate`` writes nothing: it is acknowledged only
    once the replica has the first acceptance, also from a connection that never
    wrote. (Redis 7.0 moves a connection's WAIT offset to the master's current one
    after every command, reads included; were it only after the connection's own
    writes, this would fail and the speed layer would need a write before WAIT.)"""
    master = own_server(tmp_path / "master")
    replica = own_server(tmp_path / "replica")
    try:
        link = redis.Redis.from_url(replica.url, socket_timeout=2)
        link.replicaof("127.0.0.1", master.port)
        link.close()
        _until(
            "the replica is in sync",
            lambda: (
                _info(replica, "replication").get("master_link_status") == "up"
                and int(_info(master, "replication")["connected_slaves"]) == 1
            ),
        )
        settings = _settings(master.url, tmp_path, acks=1, timeout_ms=200)
        with TestClient(create_app(settings)) as client:
            api = SignedClient(client)
            assert _post(api, event(eventId="D1", matchId="MD1")).status_code == 200
            # The replica stops acknowledging but stays connected (it lags).
            os.kill(replica.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                first = _post(api, event(eventId="D2", matchId="MD2"))
                assert first.status_code == 503, first.text
                # A client whose connection wrote nothing yet redelivers (the
                # API's own pool may hold such a connection; its WAIT alone would
                # count the lagging replica at once).
                redelivery = event(eventId="D2", matchId="MD2")
                with pytest.raises(ReplicasNotAcknowledged, match="0 of 1 replicas"):
                    asyncio.run(_redeliver(settings, redelivery))
                assert int(_info(master, "replication")["connected_slaves"]) == 1
            finally:
                os.kill(replica.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
            # The replica catches up: the redelivery is acknowledged now.
            for _ in range(50):
                again = _post(api, event(eventId="D2", matchId="MD2"))
                if again.status_code == 200:
                    break
                time.sleep(0.1)
            assert again.status_code == 200, again.text
            assert again.json()["status"] == "duplicate"
        check = redis.Redis.from_url(replica.url, decode_responses=True)
        positions = sum(int(check.get(Keys(p).position) or 0) for p in range(4))
        check.close()
        assert positions == 2  # the replica has both events, once each
    finally:
        replica.stop()
        master.stop()
