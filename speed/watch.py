"""A change watch: a Pub/Sub subscription that tells a reader, without a round
trip, whether what it read from Redis may have changed since.

A writer publishes on the channel in the same transaction as its change
(speed/profiles.py). The watch holds one subscribed connection and counts an
*epoch* up on every byte that arrives on it (a change message, the subscription's
confirmation, anything) and whenever the connection is lost. A reader notes the
epoch before it reads; later, :meth:`ChangeWatch.unchanged_since` says whether the
read still holds:

- the subscription is confirmed and has not been lost since;
- nothing arrived since, not even bytes the event loop has not read yet (a
  zero-timeout ``select`` on the socket: Redis writes the message to this socket
  in the same event-loop pass as the writer's reply, so it is here before the
  writer's client can ask anyone again);
- the read is younger than ``max_age_s``, a bound should the connection die
  silently.

Otherwise the reader reads again, as it would without a watch. The protocol is a
plain :class:`asyncio.Protocol` so that an arriving byte moves the epoch in the
transport's own read callback, before any task of the event loop runs; it speaks
just enough RESP (through hiredis) for AUTH and SUBSCRIBE (Pub/Sub channels
are not per database).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

log = logging.getLogger(__name__)

# A read older than this is read again even while the watch is quiet.
MAX_AGE_S = 1.0
# Between attempts to (re)subscribe after a lost or refused connection.
RETRY_S = 0.5


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where to subscribe: host and port, or a unix socket's path (``port`` 0),
    and the credentials of the Redis URL."""

    host: str
    port: int
    username: str | None = None
    password: str | None = None
    tls: bool = False


def endpoint_of(url: str) -> Endpoint | None:
    """The endpoint of a ``redis://``, ``rediss://`` or ``unix://`` URL (the
    forms redis-py reads; a unix URL's credentials in ``?password=``); None for
    anything else (readers then read on every request, as without a watch)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.scheme == "unix" and parts.path:
        return Endpoint(
            parts.path,
            0,
            query.get("username", [None])[0],
            query.get("password", [None])[0],
        )
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        return None
    return Endpoint(
        host=parts.hostname,
        port=parts.port or 6379,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        tls=parts.scheme == "rediss",
    )


class _Subscriber(asyncio.Protocol):
    def __init__(self, watch: ChangeWatch) -> None:
        self.watch = watch
        self.reader = hiredis.Reader()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.watch._connected(transport)

    def data_received(self, data: bytes) -> None:
        self.watch.epoch += 1
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            if isinstance(reply, hiredis.ReplyError):
                log.warning("change watch: %s", reply)
                self.watch._close()
            elif isinstance(reply, list) and reply[:1] == [b"subscribe"]:
                self.watch.subscribed = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.watch._lost()
        if not self.lost.done():
            self.lost.set_result(None)


class ChangeWatch:
    """The subscription to ``channel`` at an endpoint (see the module's doc)."""

    def __init__(self, channel: str, max_age_s: float = MAX_AGE_S) -> None:
        self.channel = channel
        self.max_age_s = max_age_s
        self.epoch = 0
        self.subscribed = False
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ for readers

    def mark(self) -> tuple[int, float]:
        """What a reader notes before it reads."""
        return self.epoch, time.monotonic()

    def unchanged_since(self, mark: tuple[int, float] | None) -> bool:
        """Whether nothing can have changed since ``mark`` (see the module's doc)."""
        if mark is None or not self.subscribed or mark[0] != self.epoch:
            return False
        if time.monotonic() - mark[1] >= self.max_age_s:
            return False
        try:
            readable, _, _ = select.select([self._fd], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def changed(self) -> None:
        """This process changed what is watched (its readers need not wait for the
        message)."""
        self.epoch += 1

    # ------------------------------------------------------------- lifecycle

    def start(self, where: Callable[[], Awaitable[Endpoint | None]]) -> None:
        """Keep a subscription until :meth:`stop`, at the endpoint ``where`` names
        on each (re)connection (a cluster's master of the channel's slot may
        move; None: not subscribed, every read reads)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(where))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._close()

    async def _run(self, where: Callable[[], Awaitable[Endpoint | None]]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                endpoint = await where()
                if endpoint is None:
                    return
                if endpoint.port == 0:
                    _, protocol = await loop.create_unix_connection(
                        lambda: _Subscriber(self), endpoint.host
                    )
                else:
                    _, protocol = await loop.create_connection(
                        lambda: _Subscriber(self),
                        endpoint.host,
                        endpoint.port,
                        ssl=ssl.create_default_context() if endpoint.tls else None,
                    )
                self._send(endpoint)
                await protocol.lost
            except Exception as exc:  # noqa: BLE001 - retried; reads read meanwhile
                log.debug("change watch: %s", exc)
            await asyncio.sleep(RETRY_S)

    def _send(self, endpoint: Endpoint) -> None:
        commands: list[tuple[Any, ...]] = []
        if endpoint.password is not None:
            user = () if endpoint.username is None else (endpoint.username,)
            commands.append(("AUTH", *user, endpoint.password))
        commands.append(("SUBSCRIBE", self.channel))
        assert self._transport is not None
        self._transport.write(b"".join(hiredis.pack_command(c) for c in commands))

    def _connected(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1

    def _lost(self) -> None:
        self.subscribed = False
        self.epoch += 1
        self._transport = None
        self._fd = -1

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self.subscribed = False
        self.epoch += 1


__all__ = ["ChangeWatch", "Endpoint", "endpoint_of"]
