"""The change watch (speed/watch.py) behind the profiles' cache: which URLs it
can subscribe at, and a real subscription over the unix socket `lb up` uses."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from speed.connection import async_client
from speed.profiles import CHANNEL, ProfileCache, watch_endpoint, write_profile
from speed.server import RedisServer
from speed.watch import Endpoint, endpoint_of

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("redis://127.0.0.1:7000/2", Endpoint("127.0.0.1", 7000)),
        ("redis://u:p%40ss@h", Endpoint("h", 6379, "u", "p@ss")),
        ("rediss://:pw@h:7001", Endpoint("h", 7001, None, "pw", tls=True)),
        ("unix:///run/r.sock?password=pw", Endpoint("/run/r.sock", 0, None, "pw")),
        ("redis+cluster://h:7000", None),
        ("memory://", None),
    ],
)
def test_endpoints_of_urls(url: str, endpoint: Endpoint | None) -> None:
    assert endpoint_of(url) == endpoint


async def until(condition: object, seconds: float = 30.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.02)


def test_a_write_elsewhere_ends_the_trust_at_once(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", unix_socket=True).start()
    try:
        asyncio.run(_write_elsewhere(server.url))
    finally:
        server.stop()


async def calls(client: object, command: str) -> int:
    stats = await client.info("commandstats")  # type: ignore[attr-defined]
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def _write_elsewhere(url: str) -> None:
    reader, writer = async_client(url), async_client(url)
    cache = ProfileCache()
    cache.watch.start(watch_endpoint(url, reader))
    try:
        await until(lambda: cache.watch.subscribed)
        assert await cache.profiles(reader, ["P1"]) == {}
        assert cache.watch.unchanged_since(cache._mark)
        # No profile set at all: players never seen need no lookup either.
        hmgets = await calls(reader, "hmget")
        assert await cache.profiles(reader, ["P2", "P3"], cache.version) == {}
        assert await cache.profiles(reader, ["P4"]) == {}
        assert await calls(reader, "hmget") == hmgets
        await write_profile(writer, "P1", {"displayName": "Ana"})
        # The message left Redis in the same reply flush as the writer's reply.
        assert not cache.watch.unchanged_since(cache._mark)
        assert await cache.profiles(reader, ["P1"]) == {"P1": {"displayName": "Ana"}}
        assert cache.watch.unchanged_since(cache._mark)
        # A subscriber of the channel counts only the watch's own connection.
        assert await reader.pubsub_numsub(CHANNEL) == [(CHANNEL.encode(), 1)]
    finally:
        await cache.watch.stop()
        await reader.aclose()
        await writer.aclose()
