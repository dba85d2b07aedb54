"""Redis clients for one server or a Redis Cluster, chosen by the URL.

``LB_REDIS_URL=redis://host:port/0`` names one server (as before);
``LB_REDIS_URL=redis+cluster://host:port`` (or ``rediss+cluster://`` for TLS) names
any node of a Redis Cluster: the client discovers the others and sends each command
to the master of its key's hash slot. One URL carries the choice, so every process
that is handed the URL (`lb up`'s API, the jobs, `lb status`) agrees on it without
a second variable to keep in step.

Every key of a partition carries the partition's hash tag ``{pN}``
(:mod:`speed.partitions`), so a partition's scripts run on one node unchanged. The
few keys outside partitions each live in one slot of their own: the audit stream
``lb:{audit}:log``, a season's late-review queue ``lb:{late}:<season>``, the
profiles ``lb:{profiles}`` (and their version ``lb:{profiles}:v``), and the read
caches' epoch ``lb-reads:epoch`` (their flags version is per partition,
``lb:{pN}:flags:v``, moved by ``flag_player.lua``); no command or script names two
of them together, nor one of them with a partition's keys.

The cluster clients (``redis.cluster.RedisCluster`` and its asyncio twin) are not
subclasses of ``redis.Redis``, but offer the same command methods, pipelines
(split per node, non-transactional unless every key shares a slot), scripts (SCRIPT
LOAD goes to every master; EVALSHA to the master of its first key) and ``scan_iter``
(over every master). Callers type them as ``redis.Redis`` and use only that common
surface; :func:`send_commands` is the one place that reaches below it.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

import hiredis
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.driver_info import DriverInfo
from redis.exceptions import (
    AskError,
    ClusterDownError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
# What redis-py sends with CLIENT SETINFO, resolved once: left to redis-py, every new
# connection looks its version up through importlib.metadata (~5 ms of CPU each, a
# tail-latency source when a burst grows a pool, bench/RESULTS.md, issue 13).
DRIVER_INFO = DriverInfo()
# Rounds of MOVED/ASK/TRYAGAIN/connection-error replies before giving up: a slot
# being migrated or a master failing over settles within a few topology refreshes.
MAX_REDIRECTS = 5
REDIRECT_PAUSE_S = 0.05


class RedisUrlError(ValueError):
    """A cluster URL with a database number other than 0 (a cluster has only 0)."""


class ReplicasNotAcknowledged(RedisError):
    """Fewer replicas than asked acknowledged a write within the timeout (``WAIT``):
    the master applied it, but a failover could still lose it, so its outcome is
    unknown to the client (the API answers 503; redelivery is safe)."""


# (replicas, timeout in ms) of a WAIT sent after the commands, on their connection.
ReplicaWait = tuple[int, int]


def _wait_command(wait: ReplicaWait) -> tuple[str, int, int]:
    replicas, timeout_ms = wait
    if replicas < 1 or timeout_ms < 1:  # WAIT n 0 would block forever
        raise ValueError(f"WAIT needs replicas >= 1 and a timeout >= 1 ms: {wait}")
    return ("WAIT", replicas, timeout_ms)


def _check_wait(reply: Any, wait: ReplicaWait, where: str) -> None:
    """Raise unless the WAIT's reply counts at least the replicas asked for."""
    if isinstance(reply, Exception):
        raise ReplicasNotAcknowledged(
            f"WAIT on {where} got no answer ({type(reply).__name__}: {reply}); "
            "whether the writes reached a replica is unknown"
        ) from reply
    if int(reply) < wait[0]:
        raise ReplicasNotAcknowledged(
            f"{int(reply)} of {wait[0]} replicas of {where} acknowledged the "
            f"writes within {wait[1]} ms"
        )


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """The URL with its ``+cluster`` scheme replaced by the plain one redis-py reads
    (``redis+cluster://h:p`` -> ``redis://h:p``); a plain URL unchanged."""
    scheme, sep, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower())
    if plain is None:
        return url
    path = rest.split("?", 1)[0].split("/", 1)
    if len(path) == 2 and path[1] not in ("", "0"):
        raise RedisUrlError(f"a Redis Cluster has only database 0, not /{path[1]}")
    return f"{plain}{sep}{rest}"


def sync_client(url: str, **kwargs: Any) -> redis.Redis:
    """A blocking client for ``url``: ``redis.Redis`` or ``RedisCluster``."""
    kwargs.setdefault("driver_info", DRIVER_INFO)
    if is_cluster_url(url):
        # Same command surface as redis.Redis (see the module docstring).
        return cast(redis.Redis, RedisCluster.from_url(node_url(url), **kwargs))
    return redis.Redis.from_url(url, **kwargs)


def async_client(url: str, **kwargs: Any) -> aioredis.Redis:
    """An asyncio client for ``url``; ``max_connections`` is per node on a cluster."""
    kwargs.setdefault("driver_info", DRIVER_INFO)
    if is_cluster_url(url):
        return cast(aioredis.Redis, AsyncRedisCluster.from_url(node_url(url), **kwargs))
    return aioredis.from_url(url, **kwargs)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a cluster client, known per client class: the
    isinstance check goes through typing's Protocol metaclass (about 5 us, asked
    on every batch; py-spy, session 16)."""
    kind = type(client)
    known = _CLUSTER_CLASSES.get(kind)
    if known is None:
        known = isinstance(client, AsyncRedisCluster | RedisCluster)
        if kind is client.__class__:  # not a stand-in posing as another class
            _CLUSTER_CLASSES[kind] = known
    return known


_CLUSTER_CLASSES: dict[type, bool] = {}


def _first_key(command: Sequence[Any]) -> Any:
    """The key that routes a command: EVAL/EVALSHA's first KEYS entry, else the
    first argument (every command sent through :func:`send_commands` names a key)."""
    name = command[0]
    name = (name.decode() if isinstance(name, bytes) else str(name)).upper()
    if name in ("EVALSHA", "EVAL"):
        if int(command[2]) == 0:
            raise ValueError("a script call without KEYS cannot be routed")
        return command[3]
    return command[1]


@dataclass(slots=True)
class Rider:
    """Read-only commands (of one slot) that ride along with the next
    :func:`send_commands` of the task (and the tasks it starts) while :data:`RIDER`
    holds them: a request's side read (the profiles' version, speed/profiles.py)
    without a round trip of its own. ``read`` tells whether ``replies`` came back
    (none an error)."""

    commands: tuple[tuple[Any, ...], ...]
    taken: bool = False
    read: bool = False
    replies: list[Any] | None = None


RIDER: ContextVar[Rider | None] = ContextVar("lb_rider", default=None)
# A second rider, independent of :data:`RIDER`: the read gate's bucket take
# (speed/readers.py), one EVALSHA that runs exactly once wherever it rides (a
# command a cluster answers MOVED did not run; only those are sent again).
GATE_RIDER: ContextVar[Rider | None] = ContextVar("lb_gate_rider", default=None)


async def send_commands(
    client: aioredis.Redis,
    commands: Sequence[Sequence[Any]],
    *,
    wait: ReplicaWait | None = None,
) -> list[Any]:
    """:func:`_send_commands`, with the pending :class:`Rider` of the context (if
    any, :data:`RIDER` and :data:`GATE_RIDER`) appended to the first call's
    commands and its reply taken off."""
    riders = [
        rider
        for rider in (RIDER.get(), GATE_RIDER.get())
        if rider is not None and not rider.taken
    ]
    if not riders or wait is not None:
        return await _send_commands(client, commands, wait=wait)
    riding_commands = list(commands)
    for rider in riders:
        rider.taken = True
        riding_commands += rider.commands
    replies = await _send_commands(client, riding_commands)
    end = len(replies)
    for rider in reversed(riders):
        start = end - len(rider.commands)
        riding = replies[start:end]
        if not any(isinstance(reply, Exception) for reply in riding):
            rider.read, rider.replies = True, riding
        end = start
    return replies[:end]


async def _send_commands(
    client: aioredis.Redis,
    commands: Sequence[Sequence[Any]],
    *,
    wait: ReplicaWait | None = None,
) -> list[Any]:
    """Send every command in one write per server and read the replies in order.

    What redis-py's non-transactional pipeline does, without its per-call SCRIPT
    EXISTS round trip and its pure-Python command packing (hiredis packs here). A
    reply that is an error is returned as the exception, like the pipeline's. On a
    cluster the commands are grouped by the master of their key's slot, the groups
    go out concurrently, and a command answered MOVED/ASK/TRYAGAIN (a slot moving)
    is sent again after the topology is refreshed: such a reply means it did not run.

    ``wait=(n, timeout_ms)`` ends each server's write with ``WAIT n timeout_ms`` on
    the same connection (Redis counts the replicas that acknowledged every write
    that connection made so far): one WAIT per server per call, not per command.
    :raises ReplicasNotAcknowledged: when a server that ran commands counts fewer
    than ``n`` replicas in time (the commands ran on its master; their replies are
    not returned).
    """
    if not is_cluster(client):
        if wait is None:
            return await _send_one_server(client, commands)
        answered = await _send_one_server(client, [*commands, _wait_command(wait)])
        _check_wait(answered[-1], wait, "the server")
        return answered[:-1]
    if any(isinstance(c, Packed) for c in commands):
        raise TypeError("a cluster batch routes commands by key: no Packed ones")
    cluster = cast(AsyncRedisCluster, client)
    await cluster.initialize()
    replies: list[Any] = [None] * len(commands)
    pending = list(range(len(commands)))
    for attempt in range(MAX_REDIRECTS + 1):
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for i in pending:
            node = cluster.get_node_from_key(_first_key(commands[i]))
            if node is None:  # pragma: no cover - only asked for replicas
                raise ClusterDownError("no master serves the key's slot")
            by_node.setdefault(node.name, (node, []))[1].append(i)
        tail = [_wait_command(wait)] if wait is not None else []
        results = await asyncio.gather(
            *(
                _send_to_node(node, [*(commands[i] for i in indices), *tail])
                for node, indices in by_node.values()
            )
        )
        pending = []
        short: ReplicasNotAcknowledged | None = None
        for (node, indices), node_replies in zip(
            by_node.values(), results, strict=True
        ):
            ran = False
            for i, reply in zip(indices, node_replies[: len(indices)], strict=True):
                replies[i] = reply
                if isinstance(reply, AskError | TryAgainError | RedisConnectionError):
                    pending.append(i)
                else:
                    ran = True
            if wait is not None and ran:
                try:
                    _check_wait(node_replies[-1], wait, f"master {node.name}")
                except ReplicasNotAcknowledged as exc:
                    short = short or exc
        if short is not None:
            # Whatever else is pending, this call's outcome is unknown already.
            raise short
        if not pending:
            return replies
        if attempt < MAX_REDIRECTS:
            await asyncio.sleep(REDIRECT_PAUSE_S * attempt)
            await cluster.nodes_manager.initialize()
    return replies


async def _send_to_node(node: Any, commands: list[Sequence[Any]]) -> list[Any]:
    """One node's commands in one write. A broken connection answers every command
    not read yet with the error (retried by the caller: a script whose reply was
    lost ran at most once, and the owner transaction's dedupe records make running
    an event again answer ``duplicate`` with the saved result)."""
    conn = node.acquire_connection()
    replies: list[Any] = []
    try:
        await conn.send_packed_command(
            b"".join([hiredis.pack_command(tuple(c)) for c in commands])
        )
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
    except (RedisConnectionError, OSError) as exc:
        await conn.disconnect()
        error = exc if isinstance(exc, RedisConnectionError) else RedisConnectionError()
        replies += [error] * (len(commands) - len(replies))
    finally:
        node.release(conn)
    return replies


class Packed(bytes):
    """A command already in RESP (see :func:`pack_with_prefix`), sent as is by a
    one-server batch. A cluster batch cannot route it (no key to read): it takes
    commands as tuples only."""


def packed_prefix(command: Sequence[Any]) -> tuple[int, bytes]:
    """(argument count, RESP of ``command``'s arguments without the array
    header): the fixed head of commands completed by :func:`pack_with_prefix`,
    e.g. an EVALSHA and its keys, packed once instead of on every call."""
    whole = hiredis.pack_command(tuple(command))
    return len(command), whole[whole.index(b"\r\n") + 2 :]


def pack_with_prefix(prefix: tuple[int, bytes], rest: Sequence[Any]) -> Packed:
    """The command ``prefix`` (:func:`packed_prefix`) followed by the arguments
    ``rest``, in RESP: only ``rest`` is packed here (packing a live read's 70-odd
    arguments was 3 % of its API CPU, py-spy, issue 26)."""
    count, head = prefix
    if not rest:
        return Packed(b"*%d\r\n%b" % (count, head))
    tail = hiredis.pack_command(tuple(rest))
    return Packed(
        b"*%d\r\n%b%b" % (count + len(rest), head, tail[tail.index(b"\r\n") + 2 :])
    )


async def _send_one_server(
    client: aioredis.Redis, commands: Sequence[Sequence[Any]]
) -> list[Any]:
    pool = client.connection_pool
    kept = _KEPT.get(pool)
    if kept is None:
        kept = _KEPT.setdefault(pool, [])
    loop = asyncio.get_running_loop()
    conn = None
    while kept and conn is None:
        kept_loop, conn = kept.pop()
        if kept_loop is not loop:
            # Its streams belong to another event loop (a client reused across
            # asyncio.run calls): back to the pool, as every connection went.
            await pool.release(conn)
            conn = None
        elif not _usable(conn):
            # The server closed it meanwhile (a restart): so it did every idle
            # connection, kept or pooled. All are closed here, to reconnect when
            # next used: redis-py 8's pool does not always catch a closed one
            # before handing it out (a script load after a restart read "closed
            # by server", tests/speed/test_durability.py).
            stale = [conn, *(c for kept_loop, c in kept if kept_loop is loop)]
            kept[:] = [item for item in kept if item[0] is not loop]
            for each in stale:
                await each.disconnect(nowait=True)
                await pool.release(each)
            await pool.disconnect(inuse_connections=False)
            conn = None
    if conn is None:
        conn = await pool.get_connection()
    packed = b"".join(
        [
            c if isinstance(c, Packed) else hiredis.pack_command(tuple(c))
            for c in commands
        ]
    )

    async def send_and_read() -> list[Any]:
        replies: list[Any] = []
        # One deadline (the socket timeout) for the whole batch: redis-py arms and
        # cancels a timer per reply, about a tenth of the API CPU of a live read
        # of 9-17 replies (bench/RESULTS.md, issue 13). A timeout leaves the
        # connection closed (redis-py closes it when a read is interrupted) and
        # raises redis-py's TimeoutError, as its own per-reply deadline would.
        try:
            async with asyncio.timeout(conn.socket_timeout):
                await _write(conn, packed)
                for _ in commands:
                    try:
                        replies.append(await conn.read_response(timeout=math.inf))
                    except ResponseError as exc:
                        replies.append(exc)
        except TimeoutError:
            await conn.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout reading the replies") from None
        return replies

    async def on_failure(error: BaseException) -> None:
        await conn.disconnect()

    answered = False
    try:
        replies = await conn.retry.call_with_retry(send_and_read, on_failure)
        answered = True
        return replies  # type: ignore[no-any-return]
    finally:
        # Kept only when every reply was read on a live connection; anything else
        # (an error, a cancelled read with replies unread) goes back to the pool,
        # which checks a connection before handing it out again.
        if (
            answered
            and conn.is_connected
            and len(kept) < KEPT_PER_POOL
            and not conn.should_reconnect()
        ):
            kept.append((loop, conn))
        else:
            await pool.release(conn)


# Connections the one-server batches keep between them, per pool (weakly: a closed
# client's pool goes), instead of redis-py's get_connection and release each
# time: a lock each, observability records, an event dispatch and a readiness
# check, 3.7 % of a live rank's API CPU (py-spy, session 16). They stay "in use"
# for the pool (its disconnect closes them; the next batch reconnects).
_KEPT: weakref.WeakKeyDictionary[Any, list[tuple[Any, Any]]] = (
    weakref.WeakKeyDictionary()
)
KEPT_PER_POOL = 64


def _usable(conn: Any) -> bool:
    """Whether a kept connection is still open as far as its streams know: what
    redis-py's pool checks before handing a connection out (its ``can_read``: an
    end of file or an error), without a read."""
    reader, writer = conn._reader, conn._writer
    return (
        reader is not None
        and writer is not None
        and not writer.transport.is_closing()
        and not reader.at_eof()
        and reader.exception() is None
    )


async def _write(conn: Any, packed: bytes) -> None:
    """``packed`` written on ``conn`` under the caller's deadline: redis-py's
    ``send_packed_command`` runs each write as a task of its own under
    ``asyncio.wait_for`` (about 3 % of a live rank's API CPU, py-spy, session 16).
    Its way when the connection needs connecting or a health check; a failed
    write closes the connection and raises redis-py's ConnectionError, as there."""
    writer = conn._writer
    if writer is None or conn.health_check_interval:
        await conn.send_packed_command(packed)
        return
    try:
        writer.write(packed)
        await writer.drain()
    except OSError as exc:
        await conn.disconnect(nowait=True)
        raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc
    except BaseException:
        # Interrupted mid-write: what was sent is unknown (as redis-py does).
        await conn.disconnect(nowait=True)
        raise


async def run_transaction(
    client: aioredis.Redis, commands: Sequence[Sequence[Any]]
) -> list[Any]:
    """MULTI, the commands, EXEC in one write; the EXEC reply (one per command).

    The commands must name keys of one hash slot (one partition). redis-py's own
    cluster transaction pipeline runs every queued command through ``asyncio.run``
    in a thread of its own, blocking the event loop meanwhile; this sends the block
    to the slot's master directly instead.
    :raises ResponseError: when a command or the EXEC fails.
    """
    block: list[Sequence[Any]] = [("MULTI",), *commands, ("EXEC",)]
    if is_cluster(client):
        cluster = cast(AsyncRedisCluster, client)
        await cluster.initialize()
        slots = {cluster.keyslot(_first_key(c)) for c in commands}
        if len(slots) != 1:
            raise ValueError(f"a transaction spans {len(slots)} slots")
        node = cluster.get_node_from_key(_first_key(commands[0]))
        replies = await _send_to_node(node, block)
    else:
        replies = await _send_one_server(client, block)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies[-1])
