"""Profiles: a player's display name and country, shown with its ranked entries.

One Redis hash holds every profile (field = player id, value = the profile's JSON),
so the profiles of all the entries of one answer are one HMGET, one round trip, on a
single server or a cluster (one key, one slot). A profile is replaced whole by
``PUT /v1/players/{playerId}/profile``; an unset field is absent.

Every write also counts up the profiles' version and publishes on
:data:`CHANNEL` (same transaction, same slot). A reader keeps the profiles it read
with the version they were read at (:class:`ProfileCache`) and reads the version
along with the read it makes anyway (:class:`speed.connection.Rider`): while the
version is unchanged, the profiles of players it has seen cost no round trip; any
write anywhere drops them all. A read that makes no round trip of its own (a
snapshot read) trusts the kept version while the channel's watch
(:mod:`speed.watch`) says nothing was published since it was read: a snapshot
top-100 then costs no Redis at all (one GET + HMGET per read took its closed-loop
rate from ~10,000 to ~3,100 req/s, bench/RESULTS.md "Reads"). The profiles' count
rides along with the version: while no profile is set, nothing is looked up (a
live nearby read's neighbours, unknown before its read, would cost a second round
trip).

A profile carries no visibility of its own: the read service attaches profiles only
to the entries an answer already holds, so a shadowed player's profile is exactly as
hidden as the player.
"""

from __future__ import annotations

import unicodedata
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from typing import Any

import orjson

from speed.connection import (
    RIDER,
    Rider,
    is_cluster,
    node_url,
    run_transaction,
    send_commands,
)
from speed.partitions import KEY_PREFIX
from speed.watch import ChangeWatch, Endpoint, endpoint_of

PROFILES_KEY = f"{KEY_PREFIX}:{{profiles}}"
VERSION_KEY = f"{KEY_PREFIX}:{{profiles}}:v"
# Published on with every write; the hash tag puts it in the profiles' slot.
CHANNEL = f"{KEY_PREFIX}:{{profiles}}:changed"
# Players whose profile (or its absence) a reader keeps.
CACHED = 100_000
FIELDS = ("displayName", "country")
NAME_MAX = 32
# Not allowed in a display name: control characters (Cc), line and paragraph
# separators (Zl, Zp: line breaks by another name) and lone surrogates (Cs).
REFUSED_CATEGORIES = frozenset(("Cc", "Cs", "Zl", "Zp"))


class ProfileInvalid(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@cache
def countries() -> frozenset[str]:
    """ISO 3166-1 alpha-2 codes, from the IANA time zone database's ``iso3166.tab``
    as the ``tzdata`` package ships it (every officially assigned code)."""
    text = resources.files("tzdata").joinpath("zoneinfo", "iso3166.tab").read_text()
    codes = (line.split("\t", 1)[0] for line in text.splitlines())
    return frozenset(c for c in codes if len(c) == 2 and c.isascii() and c.isupper())


def display_name(value: Any) -> str:
    if not isinstance(value, str):
        raise ProfileInvalid("displayName", "displayName: must be a string")
    name = unicodedata.normalize("NFC", value)
    if not 1 <= len(name) <= NAME_MAX:
        raise ProfileInvalid(
            "displayName", f"displayName: 1-{NAME_MAX} characters after NFC"
        )
    if any(unicodedata.category(c) in REFUSED_CATEGORIES for c in name):
        raise ProfileInvalid(
            "displayName", "displayName: no control or line-break characters"
        )
    return name


def country(value: Any) -> str:
    if not isinstance(value, str) or value not in countries():
        raise ProfileInvalid(
            "country", "country: an ISO 3166-1 alpha-2 code in capitals, e.g. SE"
        )
    return value


def parse_profile(raw: Any) -> dict[str, str]:
    """The profile of a ``{"displayName", "country"}`` body (either may be absent or
    null: unset)."""
    if not isinstance(raw, dict) or not set(raw) <= set(FIELDS):
        raise ProfileInvalid(
            "profile", 'body must be {"displayName": ..., "country": ...}'
        )
    profile: dict[str, str] = {}
    if raw.get("displayName") is not None:
        profile["displayName"] = display_name(raw["displayName"])
    if raw.get("country") is not None:
        profile["country"] = country(raw["country"])
    return profile


async def write_profile(client: Any, player_id: str, profile: dict[str, str]) -> None:
    """Replace the player's profile (an empty one removes it), and count the
    version up, in one transaction."""
    change: tuple[Any, ...] = (
        ("HSET", PROFILES_KEY, player_id, orjson.dumps(profile))
        if profile
        else ("HDEL", PROFILES_KEY, player_id)
    )
    await run_transaction(
        client, [change, ("INCR", VERSION_KEY), ("PUBLISH", CHANNEL, b"1")]
    )


@contextmanager
def version_rider(players: tuple[str, ...] = ()) -> Iterator[Rider]:
    """A :class:`Rider` reading the profiles' version (and the profiles of
    ``players``, known before the read), in :data:`RIDER` for the block: a read in
    it brings them back with its own round trip."""
    commands: list[tuple[Any, ...]] = [("GET", VERSION_KEY), ("HLEN", PROFILES_KEY)]
    if players:
        commands.append(("HMGET", PROFILES_KEY, *players))
    rider = Rider(tuple(commands))
    token = RIDER.set(rider)
    try:
        yield rider
    finally:
        RIDER.reset(token)


def _version(raw: Any) -> int:
    return int(raw) if raw is not None else 0


def watch_endpoint(url: str, client: Any) -> Any:
    """What :meth:`ChangeWatch.start` asks on each (re)connection: the endpoint
    of ``url``, on a cluster the master now serving the profiles' slot (a
    publish reaches that node's subscribers first)."""

    async def where() -> Endpoint | None:
        endpoint = endpoint_of(node_url(url))
        if endpoint is None or not is_cluster(client):
            return endpoint
        await client.initialize()
        node = client.get_node_from_key(PROFILES_KEY)
        return Endpoint(
            node.host,
            int(node.port),
            endpoint.username,
            endpoint.password,
            tls=endpoint.tls,
        )

    return where


class ProfileCache:
    """Profiles (None: unset) of the players seen, as of one profiles version;
    ``watch`` tells when that version may be trusted without reading it."""

    def __init__(self, size: int = CACHED, watch: ChangeWatch | None = None) -> None:
        self.size = size
        self.watch = watch or ChangeWatch(CHANNEL)
        self.version: int | None = None
        # No profile is set at ``version``: no player needs looking up.
        self.empty = False
        # The watch's mark taken before the kept version was last read.
        self._mark: tuple[int, float] | None = None
        self._entries: OrderedDict[str, dict[str, str] | None] = OrderedDict()

    def mark(self) -> tuple[int, float]:
        """Note before a read whose rider reads the version (see :meth:`take`)."""
        return self.watch.mark()

    def changed(self) -> None:
        """This process wrote a profile: nothing kept is trusted unread."""
        self.watch.changed()

    def _keep(
        self,
        version: int,
        values: dict[str, dict[str, str] | None],
        mark: tuple[int, float] | None,
        count: int,
    ) -> None:
        if version != self.version:
            self._entries.clear()
            self.version = version
        self.empty = count == 0
        self._mark = mark
        self._entries.update(values)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def take(
        self,
        rider: Rider,
        players: tuple[str, ...],
        mark: tuple[int, float] | None = None,
    ) -> int | None:
        """Keep what ``rider`` (of :func:`version_rider` for ``players``) read,
        ``mark`` taken before it was sent; the profiles' version it read, None
        when it did not ride along."""
        if not rider.read or rider.replies is None:
            return None
        version = _version(rider.replies[0])
        values = rider.replies[2] if players else ()
        self._keep(
            version,
            {
                p: orjson.loads(v) if v else None
                for p, v in zip(players, values, strict=True)
            },
            mark,
            int(rider.replies[1]),
        )
        return version

    async def profiles(
        self, client: Any, players: list[str], version: int | None = None
    ) -> dict[str, dict[str, str]]:
        """The set profiles of ``players``. ``version``: the profiles' version as
        just read (a rider's reply), else None: then the kept version if the watch
        says nothing changed since it was read. Players known at that version cost
        nothing; the others are read in one round trip (HMGET, with the version)."""
        missing = players
        read: dict[str, dict[str, str] | None]
        if version is None and self.watch.unchanged_since(self._mark):
            version = self.version
        if version is not None and version == self.version:
            if self.empty:
                return {}
            missing = [p for p in players if p not in self._entries]
        if missing:
            mark = self.watch.mark()
            raw_version, count, values = await send_commands(
                client,
                [
                    ("GET", VERSION_KEY),
                    ("HLEN", PROFILES_KEY),
                    ("HMGET", PROFILES_KEY, *missing),
                ],
            )
            if isinstance(values, Exception):
                raise values
            read = {
                p: orjson.loads(v) if v else None
                for p, v in zip(missing, values, strict=True)
            }
            now = _version(raw_version)
            if now != self.version and len(missing) < len(players):
                # Changed since the rider read it: the kept ones may be stale.
                self._entries.clear()
                return await self.profiles(client, players, now)
            self._keep(now, read, mark, int(count))
        else:
            read = {}
        found: dict[str, dict[str, str]] = {}
        for player in players:
            profile = read[player] if player in read else self._entries.get(player)
            if profile:
                found[player] = profile
        return found


__all__ = [
    "CHANNEL",
    "PROFILES_KEY",
    "VERSION_KEY",
    "ProfileCache",
    "ProfileInvalid",
    "countries",
    "parse_profile",
    "version_rider",
    "watch_endpoint",
    "write_profile",
]
