"""The interface of every Lua script of the speed layer, declared once.

Each script's KEYS and ARGV layout (fixed slots, then an optional group repeated per
item, then an optional variadic rest) and its reply shape live here, and only here:
:func:`source` prepends the offset tables the Lua names them by, generated from the
declaration (:meth:`ScriptInterface.lua_header`)::

    local KEY = {flags = 1, base = 2}
    local KEY_GROUP = {start = 3, size = 5, totals = 0, chz = 1, ...}
    local ARG = {player = 1, action = 2, ...}
    local ARG_GROUP = {start = 5, size = 3, board = 0, ...}
    local ARG_REST = 1
    local EV = {size = 11, player = 0, ...}   -- a declared record
    local EV_FORMAT = "i8..."                 -- a packed record's struct format

so a ``.lua`` file holds no offset of its own. ``tests/unit/test_script_interfaces.py``
checks that a script names only offsets its interface declares (and indexes KEYS or
ARGV with no bare number). Callers build their KEYS and ARGV through
:meth:`ScriptInterface.keys_of` and :meth:`ScriptInterface.args_of`, which order named
values as declared and refuse a missing or unknown name, and get the script itself
from :func:`register`, the one place a script is registered with a client.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speed.lua import load


class ScriptArgumentError(ValueError):
    """Named KEYS/ARGV values do not match the script's declared layout."""


# Field types of a packed record ("name:type" in a record's fields): its (Lua
# ``struct`` code, Python ``struct`` code), little-endian, no alignment. A "bytes"
# field is a 4-byte length and the bytes (Lua "I4c0" gives the string alone); the
# numbers of a record come before its bytes fields, so Python packs them with one
# ``struct.Struct`` and appends the strings.
PACKED_TYPES: dict[str, tuple[str, str]] = {
    "u8": ("B", "B"),
    "u16": ("H", "H"),
    "u32": ("I4", "I"),
    "i64": ("i8", "q"),
    "bytes": ("I4c0", ""),
}


# A declared name becomes a Lua table field (KEY.<name>): none may be a keyword.
LUA_KEYWORDS = frozenset(
    "and break do else elseif end false for function if in local nil not or repeat"
    " return then true until while".split()
)


def _split(field: str) -> tuple[str, str | None]:
    name, _, kind = field.partition(":")
    return name, kind or None


@dataclass(frozen=True)
class RecordPacker:
    """Packs one record in its declared field order (numbers, then strings)."""

    numbers: struct.Struct
    strings: int

    def pack(self, numbers: Sequence[int], strings: Iterable[bytes] = ()) -> bytes:
        return self.numbers.pack(*numbers) + pack_strings(strings)


def pack_strings(strings: Iterable[bytes]) -> bytes:
    """Strings as a packed record's "bytes" fields hold them."""
    return b"".join([len(s).to_bytes(4, "little") + s for s in strings])


def _ordered(names: Sequence[str], values: Mapping[str, Any], what: str) -> list[Any]:
    missing = [n for n in names if n not in values]
    extra = [n for n in values if n not in names]
    if missing or extra:
        raise ScriptArgumentError(f"{what}: missing {missing}, unknown {extra}")
    return [values[n] for n in names]


@dataclass(frozen=True)
class ScriptInterface:
    """KEYS/ARGV layout and reply shape of one script (``speed/lua/<name>.lua``).

    ``keys``/``argv`` are the fixed slots from index 1; ``key_group``/``argv_group``
    follow them, repeated once per item (board, event...); ``argv_rest`` names a
    variadic tail (the Lua reads ``ARGV[ARG_REST ..]``). A reply is either a status
    pair ``{kind, payload}`` with kind in ``statuses``, or the positional ``fields``.
    """

    name: str
    keys: tuple[str, ...] = ()
    key_group: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()
    argv_group: tuple[str, ...] = ()
    argv_rest: str | None = None
    statuses: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    # Repeated records read at offsets the script computes (name -> fields): the
    # Lua declares each as a table of 0-based offsets plus its size. A record whose
    # fields are typed ("name:type", PACKED_TYPES) is packed into one string and
    # read with ``struct.unpack``: the Lua also declares ``<NAME>_FORMAT``.
    records: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def keys_of(
        self, fixed: Mapping[str, Any], groups: Sequence[Mapping[str, Any]] = ()
    ) -> list[Any]:
        out = _ordered(self.keys, fixed, f"{self.name} KEYS")
        for group in groups:
            out += _ordered(self.key_group, group, f"{self.name} KEYS group")
        return out

    def args_of(
        self,
        fixed: Mapping[str, Any],
        groups: Sequence[Mapping[str, Any]] = (),
        rest: Sequence[Any] = (),
    ) -> list[Any]:
        out = _ordered(self.argv, fixed, f"{self.name} ARGV")
        for group in groups:
            out += _ordered(self.argv_group, group, f"{self.name} ARGV group")
        if rest and self.argv_rest is None:
            raise ScriptArgumentError(f"{self.name} takes no variadic ARGV")
        return out + list(rest)

    def field(self, reply: Sequence[Any], name: str) -> Any:
        """One named element of a positional reply."""
        return reply[self.fields.index(name)]

    def lua_tables(self) -> dict[str, dict[str, int]]:
        """The offset tables the Lua must declare (see the module docstring)."""
        tables: dict[str, dict[str, int]] = {}
        if self.keys:
            tables["KEY"] = {n: i + 1 for i, n in enumerate(self.keys)}
        if self.key_group:
            tables["KEY_GROUP"] = {
                "start": len(self.keys) + 1,
                "size": len(self.key_group),
                **{n: i for i, n in enumerate(self.key_group)},
            }
        if self.argv:
            tables["ARG"] = {n: i + 1 for i, n in enumerate(self.argv)}
        if self.argv_group:
            tables["ARG_GROUP"] = {
                "start": len(self.argv) + 1,
                "size": len(self.argv_group),
                **{n: i for i, n in enumerate(self.argv_group)},
            }
        for name, fields in self.records:
            names = [_split(f)[0] for f in fields]
            tables[name] = {"size": len(names), **{n: i for i, n in enumerate(names)}}
        return tables

    def lua_header(self) -> str:
        """The Lua declaring this layout, prepended to the script by :func:`source`."""
        lines = ["-- Offsets generated from speed/scripts.py " + self.name + "."]
        for table, entries in self.lua_tables().items():
            bad = [n for n in entries if not n.isidentifier() or n in LUA_KEYWORDS]
            if bad:
                raise ScriptArgumentError(f"{self.name} {table}: not Lua names {bad}")
            body = ", ".join(f"{n} = {i}" for n, i in entries.items())
            lines.append(f"local {table} = {{{body}}}")
        for name, fmt in self.lua_formats().items():
            lines.append(f'local {name} = "{fmt}"')
        if self.argv_rest is not None:
            lines.append(f"local ARG_REST = {len(self.argv) + 1}")
        return "\n".join(lines) + "\n"

    def record(self, name: str) -> tuple[str, ...]:
        return tuple(_split(f)[0] for f in dict(self.records)[name])

    def _types(self, name: str) -> list[str]:
        types = [_split(f)[1] for f in dict(self.records)[name]]
        if None in types:
            raise ScriptArgumentError(f"{self.name} record {name} is not packed")
        kinds = [t for t in types if t is not None]
        unknown = set(kinds) - set(PACKED_TYPES)
        if unknown:
            raise ScriptArgumentError(f"{name}: unknown field types {unknown}")
        if "bytes" in kinds and set(kinds[kinds.index("bytes") :]) != {"bytes"}:
            raise ScriptArgumentError(f"{name}: numbers must precede bytes fields")
        return kinds

    def lua_formats(self) -> dict[str, str]:
        """The ``struct`` format of each packed record, as the Lua declares it
        (``local <NAME>_FORMAT = "..."``; the script prepends "<")."""
        return {
            f"{name}_FORMAT": "".join(PACKED_TYPES[t][0] for t in self._types(name))
            for name, fields in self.records
            if all(_split(f)[1] for f in fields)
        }

    def packer(self, name: str) -> RecordPacker:
        types = self._types(name)
        numbers = "".join(PACKED_TYPES[t][1] for t in types if t != "bytes")
        return RecordPacker(struct.Struct("<" + numbers), types.count("bytes"))


APPLY_EVENT = ScriptInterface(
    name="apply_event",
    keys=("log", "position", "flags", "quarantine", "base"),
    # chb: the snapshot side of the changed-set, a bitmap over base rows; chc:
    # its set bits per block of rows (lib/changed_counts.lua).
    key_group=("totals", "chz", "chb", "chc", "fw", "bk"),
    argv=(
        "now_ms",
        "retention",
        "rate_capacity",
        "rate_refill_ms",
        "partition",
        "mode",
        "n_boards",
        "n_events",
        # Rule version of most boards: contribution records name only the others.
        "default_rule",
        # The partition's base generation the base rows below refer to (-1: not
        # known yet): the script refuses the chunk with "rebased" otherwise.
        "base_generation",
        # Unix time a record bucket written now expires at (a backstop: records
        # leave with their epoch, speed/records.py).
        "record_expire_at",
        # The partition's live record epochs as the caller read them (the base
        # hash's "ep", newest first; "" when none yet): the event's record buckets
        # below are those epochs'; the script refuses the chunk with "rebased"
        # when the partition's differ.
        "epochs",
        "n_epochs",
        # The wall-clock slice and Unix seconds now: an epoch started in an earlier
        # slice is closed first (speed/records.py).
        "slice",
        "wall_s",
    ),
    # The chunk's board table: one group per board any of its events references.
    # sign: 1 on order "desc" boards, -1 on "asc" ones (oriented scores).
    argv_group=("board", "aggregation", "first_achieved", "cutoff_ms", "rule", "sign"),
    records=(
        # After the board table, one argument per event: an EV record, then its
        # n_refs EV_BOARD records, packed into one string (a Lua table of ~100
        # ARGV strings per event cost more Redis CPU than the C unpack).
        (
            "EV",
            (
                "revision:i64",
                "occurred_ms:i64",
                "min_gap_ms:i64",
                "max_per_hour:i64",
                "key_at:u32",
                "n_refs:u16",
                "player:bytes",
                "event_id:bytes",
                "match_id:bytes",
                "fingerprint:bytes",
                "event_json:bytes",
                # 8-byte hashes of (playerId, eventId) and (playerId, matchId): the
                # fields of the dedupe and the contribution record.
                "dedupe_field:bytes",
                "contribution_field:bytes",
                # "<day>|<week>|<region>" of the event: what the board names of its
                # contribution record are short against (speed/records.py).
                "context:bytes",
                # The event's field in the partition's quarantine hash, per game
                # (speed/partitions.py Keys.held_field).
                "held_field:bytes",
                # The event's dedupe record and its match's contribution record in
                # the landed records index of the base generation
                # (serving/landed.py), "" when it has none: used when Redis holds
                # none (the epoch holding it left at a rebase).
                "landed_dedupe:bytes",
                "landed_contribution:bytes",
            ),
        ),
        # board: 1-based index into the board table; best: KEYS index of the
        # player's best-of zset on an aggregation "max" board, else 0.
        # saved_as: the board's name in the saved result (speed/records.py).
        # base_row: the player's local row in the base segment of the board
        # (speed/baserows.py), -1 when not in it; base: its "score,version
        # [,achievedMs]" there ("" when not in it), what the script starts from
        # when Redis holds no total for the pair (unchanged since the base).
        (
            "EV_BOARD",
            (
                "board:u16",
                "feeds:u8",
                "points:i64",
                "threshold:i64",
                "best:u32",
                "base_row:i64",
                "saved_as:bytes",
                "base:bytes",
            ),
        ),
        # The event's own keys, from KEYS[key_at]; after them (EV_KEY.size on) its
        # dedupe record's bucket in each live epoch (n_epochs, newest first), then
        # its contribution record's likewise (speed/records.py).
        ("EV_KEY", ("rate", "recent")),
    ),
    # The reply holds one (kind, payload) pair per event, in order.
    statuses=(
        "ok",
        "duplicate",
        "conflict",
        "rate_limited",
        "retry",
        "implausible",
        "superseded",
        "noop",
        # Alone in the reply: the partition's base is another generation (the
        # payload); nothing ran, send the chunk again with rows of that one.
        "rebased",
    ),
)

APPROX_RANK = ScriptInterface(
    name="approx_rank",
    keys=("fw", "bk", "base", "position"),
    argv=("score", "bucket", "size"),
    fields=("higher", "same_bucket", "all", "base_generation", "position"),
)

APPROX_TABLE = ScriptInterface(
    name="approx_table",
    keys=("fw", "base", "position", "flags_version"),
    fields=("base_generation", "position", "tree", "flags_version"),
)

FLAG_PLAYER = ScriptInterface(
    name="flag_player",
    # flags_version: moved by the script itself (the read caches' stamp).
    keys=("flags", "base", "flags_version"),
    key_group=("totals", "chz", "chb", "chc", "fw", "bk"),
    argv=("player", "action", "expected_generation", "n_boards"),
    # base_version: the pair's version in the base ("" when not in it or none): a
    # player shadowed without a total in Redis gets one (the next generation
    # leaves it out, so its total must not rest on it).
    argv_group=("board", "base_score", "base_achieved_ms", "base_row", "base_version"),
    statuses=("ok", "noop", "retry"),
)

FRIENDS_SCORES = ScriptInterface(
    name="friends_scores",
    keys=("base", "position", "totals"),
    argv_rest="players",
    fields=("base_generation", "position", "totals"),
)

LIVE_COUNTS = ScriptInterface(
    name="live_counts",
    # One group per partition read: all of them in one call on one server, one
    # per call on a cluster (speed/live.py); the reply holds one list of the
    # fields per group.
    # epoch: the read caches' epoch on one server; on a cluster (one group per
    # call, keys of one slot) the group's position key stands in: nothing is
    # known there (known ""), so what it holds is never compared.
    keys=("epoch",),
    key_group=("base", "position", "chz", "chb", "chc", "totals", "flags_version"),
    # expected: the total the caller guessed for verify_player ("" none): when
    # that player holds another, the reply is {"moved", its total} alone.
    argv=("above", "before", "expected"),
    # chb_above / chb_before: the partition's base rows above the score / before
    # the entry (local counts, speed/baserows.py), read for the base generation
    # the caller assumed; the reply names the real one. known: the stamp
    # (see fields) the caller holds the partition's sizes for ("" none): when
    # it is the partition's, chz_size and chs_size are not counted (-1).
    # held: "1" when the caller also holds the partition's whole changed-set
    # for the known stamp (speed/live.py HeldPart): when that stamp is the
    # partition's, nothing is counted (all six counts -1: the caller counts them
    # in what it holds; a ZLEXCOUNT or BITCOUNT each, and the bitmap's bytes up
    # to the entry, per partition and read otherwise).
    argv_group=("verify_player", "chb_above", "chb_before", "known", "held"),
    # stamp: "g|position|flags version|epoch" as read: the changed-set's sizes
    # move only with one of them (the owner transaction moves the position,
    # flag_player.lua the flags version, a rebase or rebuild the base, a
    # replaced dataset the epoch; as for the dense parts, speed/live.py).
    fields=(
        "base_generation",
        "position",
        "chz_above",
        "chs_above",
        "chz_before",
        "chs_before",
        "chz_size",
        "chs_size",
        "verified",
        "stamp",
    ),
    # {"moved", total} instead of the groups: see expected.
    statuses=("moved",),
)

LIVE_DENSE = ScriptInterface(
    name="live_dense",
    # One group per partition read (see LIVE_COUNTS); one reply list per group.
    # LIVE_COUNTS' keys (its totals are not read): the reply's stamp is built as
    # a live_counts.lua reply's, so what it read is held for that stamp.
    keys=LIVE_COUNTS.keys,
    key_group=LIVE_COUNTS.key_group,
    fields=("base_generation", "position", "chz_members", "chb_bitmap", "stamp"),
)

LIVE_NEARBY = ScriptInterface(
    name="live_nearby",
    # LIVE_COUNTS and the window of LIVE_WINDOW around the entry "before" in one
    # call (a live nearby read), with the count above a guessed top score: one
    # group per partition read (see LIVE_COUNTS).
    keys=LIVE_COUNTS.keys,
    key_group=LIVE_COUNTS.key_group,
    # forward_limit / backward_limit: changed players to read after / before the
    # entry (0 skips that read), no further than forward_max / backward_min
    # (ZRANGEBYLEX bounds: "+" / "-", or "[" and an entry); top: the encoded score
    # to count above too ("": none), chb_top: the partition's base rows above it
    # (local count).
    argv=(
        *LIVE_COUNTS.argv,
        "forward_limit",
        "backward_limit",
        "forward_max",
        "backward_min",
        "top",
    ),
    argv_group=(
        *LIVE_COUNTS.argv_group,
        "snapshot_first",
        "snapshot_stop",
        "chb_top",
    ),
    # LIVE_COUNTS' fields first (a reply group is a counts reply too), then
    # LIVE_WINDOW's last three, then LIVE_COUNTS' chz_above and chs_above for top.
    fields=(
        *LIVE_COUNTS.fields,
        "forward",
        "backward",
        "snapshot",
        "chz_top",
        "chs_top",
    ),
    statuses=LIVE_COUNTS.statuses,
)

LIVE_STAMP = ScriptInterface(
    name="live_stamp",
    # One group per partition; the reply repeats the fields per group, flattened.
    key_group=("base", "position", "flags_version"),
    fields=("base_generation", "position", "flags_version"),
)

READ_STAMP = ScriptInterface(
    name="read_stamp",
    # One server only: names keys of many slots (api/reads.py _stamp).
    keys=("epoch",),
    key_group=("base", "position", "flags_version"),
    argv=("partitions",),
    # Hash fields, each read from one hash named after the groups in KEYS.
    argv_rest="fields",
    fields=("flags_version", "epoch", "bases_and_positions", "field_values"),
)

LIVE_WINDOW = ScriptInterface(
    name="live_window",
    # One group per partition read (see LIVE_COUNTS); one reply list per group.
    key_group=("base", "position", "chz", "chb", "chc"),
    argv=("forward_start", "forward_limit", "backward_start", "backward_limit"),
    # snapshot_first / snapshot_stop: local base rows [first, stop) whose changed
    # bits to return (speed/baserows.py).
    argv_group=("snapshot_first", "snapshot_stop"),
    fields=(
        "base_generation",
        "position",
        "chz_size",
        "chs_size",
        "forward",
        "backward",
        "snapshot",
    ),
)

REBASE_PARTITION = ScriptInterface(
    name="rebase_partition",
    keys=("base", "log", "landed", "flags", "position"),
    key_group=("totals", "chz", "chb", "fw", "bk", "bk_next", "cnt_next", "chc"),
    # drop_json: per board, players whose totals leave Redis unless changed after
    # the boundary or shadowed (the generation holds their score and version).
    # drop_records: 1 when the generation has a landed records index
    # (serving/landed.py): record epochs all landed in it leave Redis; slice,
    # wall_s, lifetime: the new record epoch's slice, now, and the record
    # lifetime (closed epochs older than it are forgotten) (speed/records.py).
    argv=(
        "generation",
        "boundary",
        "n_boards",
        "snapshot_json",
        "drop_json",
        "drop_records",
        "slice",
        "wall_s",
        "lifetime",
    ),
    argv_rest="boards",
    statuses=("ok", "stale", "retry"),
)

REBUILD_PARTITION = ScriptInterface(
    name="rebuild_partition",
    keys=("base", "position", "landed"),
    key_group=("staged", "live"),
    argv=("built_through", "generation", "boundary", "landed"),
    statuses=("ok", "retry"),
)

TAKE_TOKEN = ScriptInterface(
    name="take_token",
    keys=("bucket",),
    argv=("now_ms", "capacity", "refill_ms"),
    fields=("retry_after", "refilled_at"),
)

INTERFACES: dict[str, ScriptInterface] = {
    i.name: i
    for i in (
        APPLY_EVENT,
        APPROX_RANK,
        APPROX_TABLE,
        FLAG_PLAYER,
        FRIENDS_SCORES,
        LIVE_COUNTS,
        LIVE_DENSE,
        LIVE_NEARBY,
        LIVE_STAMP,
        LIVE_WINDOW,
        READ_STAMP,
        REBASE_PARTITION,
        REBUILD_PARTITION,
        TAKE_TOKEN,
    )
}


def source(script: ScriptInterface) -> str:
    """``speed/lua/<name>.lua`` as Redis runs it: its generated offset tables, then
    the file with its ``lib/`` fragments included (speed/lua stays data)."""
    return script.lua_header() + load(script.name)


def register(client: Any, script: ScriptInterface) -> Any:
    """``speed/lua/<name>.lua`` registered with ``client`` (sync or asyncio, single
    server or cluster): called with keys and args it runs by EVALSHA, loading the
    script again after a NOSCRIPT. The one registration site of the speed layer
    (tests/unit/test_redis_ownership.py holds it)."""
    return client.register_script(source(script))
