"""speed/connection.py: the URL chooses one server or a cluster; raw sends answer in
order across masters and follow a slot that moved (real 3-master cluster)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from speed.connection import (
    DRIVER_INFO,
    RedisUrlError,
    async_client,
    is_cluster_url,
    node_url,
    run_transaction,
    send_commands,
    sync_client,
)


@pytest.mark.unit
def test_cluster_urls() -> None:
    assert is_cluster_url("redis+cluster://h:7000")
    assert is_cluster_url("REDISS+CLUSTER://h:7000")
    assert not is_cluster_url("redis://h:6379/0")
    assert not is_cluster_url("unix:///tmp/r.sock")
    assert node_url("redis+cluster://u:pw@h:7000") == "redis://u:pw@h:7000"
    assert node_url("rediss+cluster://h:7000/0") == "rediss://h:7000/0"
    assert node_url("redis://h:6379/3") == "redis://h:6379/3"
    with pytest.raises(RedisUrlError):
        node_url("redis+cluster://h:7000/2")


def _run(url: str, body: Any) -> Any:
    async def main() -> Any:
        client = async_client(url)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


@pytest.mark.integration
def test_sends_answer_in_order_across_masters(redis_cluster: str) -> None:
    check = sync_client(redis_cluster)
    assert isinstance(check, RedisCluster)
    keys = [f"lb:{{p{p}}}:conn-test" for p in range(12)]
    masters = {check.get_node_from_key(k).name for k in keys}
    assert len(masters) == 3  # the keys span every master

    async def body(client: Any) -> list[Any]:
        return await send_commands(
            client,
            [("SET", k, i) for i, k in enumerate(keys)]
            + [("GET", k) for k in keys]
            + [("HGET", keys[0], "x")],  # WRONGTYPE: returned, not raised
        )

    replies = _run(redis_cluster, body)
    assert replies[: len(keys)] == [b"OK"] * len(keys)
    assert replies[len(keys) : 2 * len(keys)] == [
        str(i).encode() for i in range(len(keys))
    ]
    assert isinstance(replies[-1], redis.ResponseError)

    async def cross_slot(client: Any) -> None:
        await run_transaction(client, [("DEL", keys[0]), ("DEL", keys[1])])

    with pytest.raises(ValueError, match="slots"):
        _run(redis_cluster, cross_slot)
    check.delete(*keys)
    check.close()


def _hand_slot_over(slot: int, source: Any, target: Any, masters: list[Any]) -> None:
    """Move an empty slot the way redis-cli's resharding does (IMPORTING on the
    target, MIGRATING on the source, NODE on the target first), then wait until every
    master names the target. A bare ``SETSLOT NODE`` sent to each master bumps no
    config epoch, so a heartbeat from the old owner still in flight can hand the slot
    back on some nodes and leave them answering MOVED to each other (a CI flake)."""

    def plain(node: Any) -> redis.Redis:
        return redis.Redis(host=node.host, port=node.port)

    ids = {
        n.name: plain(n).execute_command("CLUSTER", "MYID").decode() for n in masters
    }
    plain(target).execute_command(
        "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.name]
    )
    plain(source).execute_command(
        "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.name]
    )
    others = [n for n in masters if n.name not in (source.name, target.name)]
    for node in [target, source, *others]:
        plain(node).execute_command(
            "CLUSTER", "SETSLOT", slot, "NODE", ids[target.name]
        )
    deadline = time.monotonic() + 10
    while True:
        owners = set()
        for node in masters:
            for first, last, owner, *_ in plain(node).execute_command(
                "CLUSTER", "SLOTS"
            ):
                if first <= slot <= last:
                    owners.add(
                        (
                            owner[0].decode()
                            if isinstance(owner[0], bytes)
                            else owner[0],
                            owner[1],
                        )
                    )
        if owners == {(target.host, target.port)}:
            return
        assert time.monotonic() < deadline, f"slot {slot} still owned by {owners}"
        time.sleep(0.05)


@pytest.mark.integration
def test_a_moved_slot_is_followed(redis_cluster: str) -> None:
    """A command sent to a master that no longer owns the slot gets MOVED; the
    sender refreshes the slot map and sends it again to the new owner."""
    admin = sync_client(redis_cluster)
    assert isinstance(admin, RedisCluster)
    key = "lb:{conn-moved}:k"
    slot = admin.keyslot(key)
    masters = admin.get_primaries()
    source = admin.get_node_from_key(key)
    target = next(n for n in masters if n.name != source.name)

    async def body(client: Any) -> list[Any]:
        await client.initialize()  # slot map cached with the old owner
        _hand_slot_over(slot, source, target, masters)  # the slot is empty
        return await send_commands(client, [("SET", key, "v"), ("GET", key)])

    try:
        assert _run(redis_cluster, body)[1] == b"v"
        plain = redis.Redis(host=target.host, port=target.port)
        assert plain.get(key) == b"v"  # it landed on the new owner
        plain.delete(key)
        plain.close()
    finally:
        # Give the slot back so the session's cluster keeps its layout.
        _hand_slot_over(slot, target, source, masters)
        admin.close()


@pytest.mark.integration
@pytest.mark.parametrize("redis_backend", ["single", "cluster"], indirect=True)
def test_new_connections_do_not_look_up_the_library_version(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py resolves its version through importlib.metadata per connection
    unless given driver_info (~5 ms of CPU each); the clients carry it, resolved
    once, and still announce it (CLIENT SETINFO, on Redis >= 7.2)."""
    import redis.utils

    looked_up: list[str] = []
    original = redis.utils.get_lib_version

    def counted() -> str:
        looked_up.append("version")
        return original()

    monkeypatch.setattr(redis.utils, "get_lib_version", counted)

    async def body(client: Any) -> None:
        # Several connections at once: the pool opens new ones.
        await asyncio.gather(*(client.ping() for _ in range(8)))

    _run(redis_url, body)
    check = sync_client(redis_url)
    try:
        check.ping()
    finally:
        check.close()
    assert looked_up == []
    assert (DRIVER_INFO.formatted_name, DRIVER_INFO.lib_version) == (
        "redis-py",
        original(),
    )


@pytest.mark.integration
def test_one_deadline_per_batch_on_one_server(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's replies are read under one deadline, not a timer per reply (armed
    and cancelled per reply, about a tenth of a live read's API CPU); a batch that
    overruns it raises redis-py's TimeoutError and the client still works."""
    import redis.asyncio.connection as aio_connection
    from redis.exceptions import TimeoutError as RedisTimeoutError

    armed: list[float | None] = []
    original = aio_connection.async_timeout

    def counted(delay: float | None) -> Any:
        armed.append(delay)
        return original(delay)

    monkeypatch.setattr(aio_connection, "async_timeout", counted)
    commands: list[tuple[Any, ...]] = [("SET", "conn-batch", "v")]
    commands += [("GET", "conn-batch")] * 16

    async def batch(client: Any) -> list[Any]:
        await client.ping()  # opens the connection (its connect timer)
        armed.clear()
        return await send_commands(client, commands)

    replies = _run(redis_url, batch)
    assert replies[0] is True or replies[0] == b"OK"
    assert replies[1:] == [b"v"] * 16
    # At most the write's own timer (send_packed_command); none per reply.
    assert len(armed) <= 1, armed

    async def overrun(client: Any) -> Any:
        slow = async_client(redis_url, socket_timeout=0.2)
        try:
            with pytest.raises(RedisTimeoutError):
                # Blocks 1 s on the server: past the 0.2 s deadline (retried by
                # redis-py's retry policy, each attempt times out the same way).
                await send_commands(slow, [("PING",), ("BLPOP", "conn-empty", 1)])
            return await send_commands(slow, [("PING",)])
        finally:
            await slow.aclose()

    assert _run(redis_url, overrun) in ([True], [b"PONG"])
