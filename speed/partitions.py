"""Partitions and Redis key names.

``partition = crc32(utf-8 playerId) mod P``: stable across processes, languages and
restarts (Python's ``hash`` is salted per process, so it cannot be used). Every key
an event touches carries its partition's hash tag ``{pN}``, so one event's keys share a
Redis Cluster slot and the same Lua runs on one server or on a cluster.
"""

from __future__ import annotations

import zlib

KEY_PREFIX = "lb"


def partition_of(player_id: str, partitions: int) -> int:
    return zlib.crc32(player_id.encode("utf-8")) % partitions


def tag(partition: int) -> str:
    return f"{{p{partition}}}"


class Keys:
    """Key names of one partition. Player and event ids may contain ':' safely:
    they are always the last component of a key."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.base = f"{KEY_PREFIX}:{tag(partition)}"

    def dedupe(self, player_id: str, event_id: str) -> str:
        # Length-prefix the player id so (a:b, c) and (a, b:c) never collide.
        return f"{self.base}:ev:{len(player_id)}:{player_id}:{event_id}"

    def contribution(self, player_id: str, match_id: str) -> str:
        return f"{self.base}:ct:{len(player_id)}:{player_id}:{match_id}"

    def rate(self, player_id: str) -> str:
        return f"{self.base}:rl:{player_id}"

    @property
    def log(self) -> str:
        """Stream of accepted records; entry id ``<position>-0``."""
        return f"{self.base}:log"

    @property
    def position(self) -> str:
        """Last position handed out on this partition's log (gap-free counter)."""
        return f"{self.base}:pos"

    @property
    def landed(self) -> str:
        """Last position the batch layer committed to Delta (log trimmed up to it)."""
        return f"{self.base}:landed"

    def totals(self, board: str) -> str:
        """Hash playerId -> "total|version" of one board."""
        return f"{self.base}:tot:{board}"

    def changed(self, board: str) -> str:
        """Hash playerId -> last position that changed it (since the base generation)."""
        return f"{self.base}:chg:{board}"

    def best(self, board: str, player_id: str) -> str:
        """Sorted set matchId -> contribution, for ``aggregation: max`` boards."""
        return f"{self.base}:mx:{board}:{player_id}"
