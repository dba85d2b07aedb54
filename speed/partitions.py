"""Partitions and Redis key names.

``partition = crc32(utf-8 playerId) mod P``: stable across processes, languages and
restarts (Python's ``hash`` is salted per process, so it cannot be used). Every key
an event touches carries its partition's hash tag ``{pN}``, so one event's keys share a
Redis Cluster slot and the same Lua runs on one server or on a cluster.
"""

from __future__ import annotations

import struct
import zlib

KEY_PREFIX = "lb"
# The dataset's epoch, part of the stamp the API's cached live answers (top lists,
# the approximate rank's histogram) are checked against (api/reads.py): a random
# number, renewed by `lb rebuild` after it repairs a partition, so no answer cached
# from the damaged keys survives it. Outside the speed layer's namespace ("lb:"):
# not state a rebuild restores or compares.
EPOCH_KEY = "lb-reads:epoch"
# Scores are encoded as 8 bytes big-endian of 2**52 - score so that byte order of
# "enc(score) + playerId" is display order (score desc, then player id asc).
SCORE_OFFSET = 2**52


# On ``tieBreak: first_achieved`` boards the time the player reached the score sits
# between score and player id: 8 bytes big-endian of achievedMs + 2**52 (earlier
# first; the offset keeps times before 1970 ordered too).
TIME_OFFSET = 2**52


def encode_entry(score: int, player_id: str, achieved_ms: int | None = None) -> bytes:
    """Member of a changed-set: its byte order is the board's display order."""
    middle = (
        b"" if achieved_ms is None else struct.pack(">Q", achieved_ms + TIME_OFFSET)
    )
    return struct.pack(">Q", SCORE_OFFSET - score) + middle + player_id.encode("utf-8")


def encode_score(score: int) -> bytes:
    return struct.pack(">Q", SCORE_OFFSET - score)


def decode_entry(member: bytes, timed: bool = False) -> tuple[int, str]:
    """(score, player id) of a member; ``timed`` on first_achieved boards."""
    (key,) = struct.unpack(">Q", member[:8])
    start = 16 if timed else 8
    return SCORE_OFFSET - key, member[start:].decode("utf-8")


def decode_achieved(member: bytes) -> int:
    (key,) = struct.unpack(">Q", member[8:16])
    return int(key) - TIME_OFFSET


def partition_of(player_id: str, partitions: int) -> int:
    return zlib.crc32(player_id.encode("utf-8")) % partitions


def tag(partition: int) -> str:
    return f"{{p{partition}}}"


# Rows per counter of a changed-set's per-block counts (Keys.changed_counts): the
# same number as lib/changed_counts.lua's CHANGED_BLOCK_ROWS (a unit test holds it).
CHANGED_BLOCK_ROWS = 1 << 16


class Keys:
    """Key names of one partition. Player and event ids may contain ':' safely:
    they are always the last component of a key."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.base = f"{KEY_PREFIX}:{tag(partition)}"

    def dedupe_bucket(self, epoch: int, bucket: int) -> str:
        """Hash of dedupe records: field = 8-byte identity hash -> fingerprint prefix
        and saved result, for one record epoch and bucket (speed/records.py)."""
        return f"{self.base}:rd:e{epoch}:{bucket}"

    def contribution_bucket(self, epoch: int, bucket: int) -> str:
        """Hash of contribution records: field = 8-byte hash of (playerId, matchId)
        -> the record's fields, encoded (speed/records.py)."""
        return f"{self.base}:rc:e{epoch}:{bucket}"

    def rate(self, player_id: str) -> str:
        return f"{self.base}:rl:{player_id}"

    def key_rate(self, key_id: str) -> str:
        """This partition's share of a signing key's bucket (LB_KEY_RATE_LIMIT)."""
        return f"{self.base}:krl:{key_id}"

    @property
    def quarantine(self) -> str:
        """Hash "<len(identity)>:<identity><eventId>" -> log record of a held event."""
        return f"{self.base}:qr"

    @staticmethod
    def held_field(identity: str, event_id: str) -> str:
        """``identity``: the player within its game (NormalizedEvent.identity): the
        playerId in the game default (the fields written before games), else
        ``<game>~<playerId>``, so the same ids held in two games are two events."""
        return f"{len(identity)}:{identity}{event_id}"

    @property
    def flags(self) -> str:
        """Hash playerId -> flag ("shadow") of the partition's flagged players."""
        return f"{self.base}:flags"

    @property
    def flags_version(self) -> str:
        """Counter of the partition's flag changes, moved by ``flag_player.lua`` in
        the same script as the flag: the read caches' stamp holds the sum over the
        partitions (each only grows, so the sum is unchanged only while every one
        is). Kept, like the flags, by a rebuild (not state derived from the log)."""
        return f"{self.base}:flags:v"

    def friends(self, player_id: str) -> str:
        """Set of the player's friends' ids (replaced whole by PUT .../friends)."""
        return f"{self.base}:fr:{player_id}"

    def recent_matches(self, player_id: str) -> str:
        """Zset matchId -> occurredAt ms of the player's recent accepted matches."""
        return f"{self.base}:pm:{player_id}"

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

    def changed_live(self, board: str) -> str:
        """Lex zset enc(live total)+playerId of players changed since the base."""
        return f"{self.base}:chz:{board}"

    def changed_snapshot(self, board: str) -> str:
        """Bitmap over the partition's rows of the base segment (speed/baserows.py):
        bit L set when the partition's L-th base player (display order) is changed
        since the base, or shadowed; its base row then leaves the live merge."""
        return f"{self.base}:chb:{board}"

    def changed_counts(self, board: str) -> str:
        """The set bits of :meth:`changed_snapshot` per block of
        ``CHANGED_BLOCK_ROWS`` rows, BITFIELD u32 slots (lib/changed_counts.lua):
        a prefix count of the bitmap reads them and one block."""
        return f"{self.base}:chc:{board}"

    def fenwick(self, board: str) -> str:
        """BITFIELD of i32 Fenwick counters over the board's buckets."""
        return f"{self.base}:fw:{board}"

    def buckets(self, board: str) -> str:
        """Zset bucket index -> lower bound (ascending)."""
        return f"{self.base}:bk:{board}"

    def staged_buckets(self, board: str) -> str:
        return f"{self.base}:bk-next:{board}"

    def staged_counts(self, board: str) -> str:
        """Next generation's counts per bucket (packed i32), staged for rebase."""
        return f"{self.base}:cnt-next:{board}"

    @property
    def base_generation(self) -> str:
        """Hash: g = number of the base generation (0 = none), pos = its boundary;
        the record epochs (ep, n, s, h<e>, t<e>: speed/records.py)."""
        return f"{self.base}:base"

    def best(self, board: str, player_id: str) -> str:
        """Sorted set matchId -> contribution, for ``aggregation: max`` boards."""
        return f"{self.base}:mx:{board}:{player_id}"
