"""Compact encodings of the per-event records of the speed layer (one home).

**Dedupe records** (written by ``apply_event.lua``, rebuilt by ``speed/rebuild.py``,
read by ``speed/store.py``) are fields of small hash keys, not one key each: the
field is an 8-byte hash of the event's identity (playerId, eventId), the value the
first 8 bytes of the content fingerprint followed by the saved result::

    <fingerprint, 8 bytes><status>|<position>|<item>;<item>...
    item = <board>,<total>,<version>[,<status>]  or  <board>

A status is one letter (:data:`STATUS_CODE`), numbers are base 36 (digits then
lower-case letters, ``-`` for negatives), an item that is only a board name has the
total, version and status of the item before it (a player's global and regional
boards often agree), and the partition is the key's own, so it is not stored.

The hash key is ``lb:{pN}:rd:e<epoch>:<bucket>``; ``bucket`` is a few more bits of
the identity hash (:data:`BUCKET_BITS`). No key and no expiry entry per record.

**Record epochs**: records go to the buckets of their partition's current *epoch*.
A rebase onto a generation starts a new epoch and deletes every epoch whose events
are all landed in that generation (the highest position handed out while it was
current is at or before the generation's boundary) when the generation publishes a
landed records index (serving/landed.py): a redelivery or correction of a landed
event is then answered from that index, which the API passes into the owner
transaction. So Redis holds only the records of the events since the last
generation. An epoch is also closed when the wall-clock slice (half a record
lifetime) moves on, and a closed epoch older than a lifetime is forgotten (its
buckets expire a lifetime after their last write): a stack that never publishes
keeps records as long as before. The partition's base hash holds, beside ``g`` and
``pos``: ``ep`` the live epochs newest first (``7,5``), ``n`` the last epoch number,
``s`` the slice the current epoch started in, ``h<e>``/``t<e>`` the highest position
and the Unix time of each closed epoch's close.

**Contribution records** (playerId, matchId) are fields of buckets likewise
(``lb:{pN}:rc:e<epoch>:<bucket>``), moved to the current epoch whenever an event of
the match touches them. The value
holds the record's fields (:func:`decode_contribution`)::

    <day>|<week>|<region>|<entry>;<entry>...
    entry = r=<revision> | u=<rule> | q=<held eventId> | Q=<revision before it>
          | <board>=<points> | <board> | ^<board>=<rule of that board>

numbers in base 36, boards in the order they entered the record, a board alone
with the points of the board before it, board names short relative to the day, ISO week
and region the value starts with (those of the event that wrote it last; a
correction may move the match to another day).

**Board names** in saved results are short where the event itself names the board
again (a redelivery has the same content, so the same ``occurredAt`` and region):
a rolling board of one of the event's own periods is its window's letter ``d``
``w`` ``m`` ``a``, a season board ``s<seasonId>``, each followed by its scope's
letter, ``g`` for ``global`` and ``r`` for the event's region
(``daily:2026-11-20:eu`` of an event in ``eu`` on 2026-11-20 is ``dr``). Every
other board keeps its full id, which always holds a ``:``; a short name never does.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from conf.boards import DEFAULT_GAME, qualify
from conf.periods import period_ids
from serving.log_records import logged_result

SHORT_WINDOW = {"daily": "d", "weekly": "w", "monthly": "m", "alltime": "a"}
LONG_WINDOW = {code: window for window, code in SHORT_WINDOW.items()}
SEASON_CODE = "s"
# Characters a short name may not hold: the saved result's separators and ":".
_RESERVED = set(":,;|")

STATUS_CODE = {
    "accepted": "a",
    "superseded": "s",
    "late-review": "l",
    "quarantined": "q",
}
STATUS_NAME = {code: name for name, code in STATUS_CODE.items()}

# Buckets per partition and slice: 2**BUCKET_BITS hash keys. Buckets bound the
# size of one hash (its table is rehashed, moved and expired as one piece) while
# holding enough records each that a key's own overhead (~100 B) is shared.
BUCKET_BITS = 6
# A record lifetime spans this many wall-clock slices; an epoch lasts at most one.
SLICES_PER_LIFETIME = 2
# Fields of the partition's base hash (speed/partitions.py Keys.base_generation)
# that name its record epochs (apply_event.lua, rebase_partition.lua).
EPOCHS_FIELD = "ep"
# Buckets outlive their last possible record by this much (clock skew between API
# processes: a record written by a slow clock into a slice still lives its time).
EXPIRY_MARGIN_SECONDS = 3600
FINGERPRINT_BYTES = 8


def event_periods(occurred_at: datetime) -> dict[str, str]:
    """window -> period id of the rolling periods holding ``occurred_at``."""
    return dict(period_ids(occurred_at))


def _scope_code(scope: str, region: str) -> str | None:
    if scope == "global":
        return "g"
    if scope == region:
        return "r"
    return None


def short_board(board: str, periods: dict[str, str], region: str) -> str:
    """The board as written in a saved result of an event with these periods and
    this region."""
    window, _, rest = board.partition(":")
    period, _, scope = rest.partition(":")
    code = _scope_code(scope, region)
    if code is None:
        return board
    if window == "season":
        if period and not _RESERVED.intersection(period):
            return f"{SEASON_CODE}{period}{code}"
        return board
    letter = SHORT_WINDOW.get(window)
    if letter is None or periods.get(window) != period:
        return board
    return f"{letter}{code}"


def long_board(name: str, periods: dict[str, str], region: str) -> str:
    """The board id of a name read from a saved result (inverse of short_board)."""
    if ":" in name:
        return name
    letter, middle, code = name[0], name[1:-1], name[-1]
    scope = "global" if code == "g" else region
    if letter == SEASON_CODE:
        return f"season:{middle}:{scope}"
    window = LONG_WINDOW[letter]
    return f"{window}:{periods[window]}:{scope}"


def identity_hash(player_id: str, other_id: str) -> tuple[int, bytes]:
    """(bucket, field) of a record of (playerId, other id): blake2b over the
    length-prefixed pair, so (a:b, c) and (a, b:c) never meet. The field holds 64
    bits and the bucket BUCKET_BITS more, all compared on a lookup: with 70 bits a
    collision between two live records of one partition is unlikely (about 4e-4 at
    10^9 records, and it makes a redelivery a 409 conflict, never a double count)."""
    text = f"{len(player_id)}:{player_id}:{other_id}".encode()
    digest = hashlib.blake2b(text, digest_size=10).digest()
    bucket = int.from_bytes(digest[8:10], "big") >> (16 - BUCKET_BITS)
    return bucket, digest[:8]


def identity_key(player_id: str, other_id: str) -> tuple[int, int]:
    """(key, check) of a record in the landed records index (serving/landed.py):
    the same hash as :func:`identity_hash`, its first 64 bits and the 16 after."""
    _, _, key, check = identity_parts(player_id, other_id)
    return key, check


def identity_parts(player_id: str, other_id: str) -> tuple[int, bytes, int, int]:
    """(bucket, field) of :func:`identity_hash` and (key, check) of
    :func:`identity_key`, from one hash (the write path needs both)."""
    text = f"{len(player_id)}:{player_id}:{other_id}".encode()
    digest = hashlib.blake2b(text, digest_size=10).digest()
    tail = int.from_bytes(digest[8:10], "big")
    field = digest[:8]
    return tail >> (16 - BUCKET_BITS), field, int.from_bytes(field, "big"), tail


def landed_entries(record: dict[str, Any]) -> list[tuple[int, int, int, int, bytes]]:
    """The records a log record left in Redis, as landed records index entries
    (kind, key, check, ms, value): its dedupe record (fingerprint prefix and saved
    result, derived from the record as speed/rebuild.py does) and the contribution
    record of its match as the event left it (the record's ``rc``, written by
    apply_event.lua; a log record from before it carries none: no entry)."""
    from serving.landed import CONTRIBUTION, DEDUPE
    from speed.events import fingerprint_of_logged, parse_rfc3339

    event = record["event"]
    player = event["playerId"]
    game = event.get("game")
    # The player within its game (speed/events.py NormalizedEvent.identity).
    who = player if not game or game == DEFAULT_GAME else qualify(game, player)
    received = int(record["receivedAtMs"])
    region = event.get("region", "")
    periods = event_periods(parse_rfc3339(event["occurredAt"]))
    value = dedupe_value(
        fingerprint_of_logged(event),
        compact_result(logged_result(record), periods, region),
    )
    key, check = identity_key(who, event["eventId"])
    out = [(DEDUPE, key, check, received, value)]
    rc = record.get("rc")
    if rc is not None:
        key, check = identity_key(who, event["matchId"])
        out.append((CONTRIBUTION, key, check, received, rc.encode()))
    return out


def slice_seconds(lifetime_seconds: int) -> int:
    return max(1, -(-lifetime_seconds // SLICES_PER_LIFETIME))


def slice_of(now_seconds: float, lifetime_seconds: int) -> int:
    """The wall-clock slice of ``now_seconds`` (half a lifetime): an epoch started
    in an earlier slice is closed by the next write (apply_event.lua)."""
    return int(now_seconds // slice_seconds(lifetime_seconds))


def bucket_expire_at(now_seconds: float, lifetime_seconds: int) -> int:
    """Unix time a record bucket written at ``now_seconds`` expires at (a backstop:
    a lifetime after its last write, plus the allowed clock skew)."""
    return int(now_seconds) + lifetime_seconds + EXPIRY_MARGIN_SECONDS


def parse_epochs(text: bytes | str | None) -> list[int]:
    """The live epochs of a partition (its base hash's ``ep``), newest first."""
    if text is None:
        return []
    raw = text.decode() if isinstance(text, bytes) else text
    return [int(e) for e in raw.split(",") if e]


def record_lookups(
    bucket_key: Any, player_id: str, other_id: str, epochs: list[int]
) -> list[tuple[str, bytes]]:
    """(bucket key, field) of the record of (playerId, other id) in every live
    epoch, newest first; ``bucket_key(epoch, bucket)`` names a bucket
    (:meth:`speed.partitions.Keys.dedupe_bucket` or ``contribution_bucket``)."""
    bucket, field = identity_hash(player_id, other_id)
    return [(bucket_key(e, bucket), field) for e in epochs]


def live_epochs(client: Any, base_key: str) -> list[int]:
    """The live epochs of a partition, read with a synchronous client."""
    return parse_epochs(client.hget(base_key, EPOCHS_FIELD))


def find_record(
    client: Any, keys: Any, kind: str, player_id: str, other_id: str
) -> bytes | None:
    """The value of a record in Redis (``kind`` "dedupe" or "contribution"; ``keys``
    a :class:`speed.partitions.Keys`), read with a synchronous client (tools and
    tests); None when Redis holds none (a landed one is in the index)."""
    bucket_key = keys.dedupe_bucket if kind == "dedupe" else keys.contribution_bucket
    epochs = live_epochs(client, keys.base_generation)
    for key, field in record_lookups(bucket_key, player_id, other_id, epochs):
        value = client.hget(key, field)
        if value is not None:
            return bytes(value)
    return None


def fingerprint_prefix(fingerprint_hex: str) -> bytes:
    """The part of the content fingerprint a dedupe record keeps (64 bits: a
    conflicting event is taken for a redelivery with probability 2**-64)."""
    return bytes.fromhex(fingerprint_hex)[:FINGERPRINT_BYTES]


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def base36(n: int) -> str:
    """``n`` in base 36 (``int(text, 36)`` reads it back)."""
    if n == 0:
        return "0"
    sign, n = ("-", -n) if n < 0 else ("", n)
    out = []
    while n:
        n, d = divmod(n, 36)
        out.append(_DIGITS[d])
    return sign + "".join(reversed(out))


def compact_result(result: dict[str, Any], periods: dict[str, str], region: str) -> str:
    """The saved result of a 200 body (``status``, ``position``, ``boards``), as
    ``apply_event.lua`` writes it."""
    parts = []
    previous: str | None = None
    for item in result.get("boards") or []:
        board = short_board(item["board"], periods, region)
        numbers = f",{base36(int(item['total']))},{base36(int(item['version']))}"
        if item.get("status"):
            numbers += f",{STATUS_CODE[item['status']]}"
        parts.append(board if numbers == previous else board + numbers)
        previous = numbers
    return f"{STATUS_CODE[result['status']]}|{base36(int(result['position']))}|" + (
        ";".join(parts)
    )


def decode_compact(
    raw: bytes | str, periods: dict[str, str] | None, region: str
) -> tuple[str, int, list[dict[str, Any]]]:
    """(status, position, boards) of a saved result; ``periods`` None leaves board
    names as stored."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    status, position, items = text.split("|", 2)
    boards: list[dict[str, Any]] = []
    numbers: list[str] = []
    for part in items.split(";") if items else ():
        name, *given = part.split(",")
        numbers = given or numbers
        item: dict[str, Any] = {
            "board": long_board(name, periods, region) if periods is not None else name,
            "total": int(numbers[0], 36),
            "version": int(numbers[1], 36),
        }
        if len(numbers) > 2:
            item["status"] = STATUS_NAME[numbers[2]]
        boards.append(item)
    return STATUS_NAME[status], int(position, 36), boards


def dedupe_value(fingerprint_hex: str, compact: str) -> bytes:
    """A dedupe record's value: fingerprint prefix, then the saved result."""
    return fingerprint_prefix(fingerprint_hex) + compact.encode()


def record_context(periods: dict[str, str], region: str) -> str:
    """The context a contribution record's board names are short against."""
    return f"{periods.get('daily', '')}|{periods.get('weekly', '')}|{region}"


def _from_base36(text: str) -> int:
    return int(text, 36)


def decode_contribution(raw: bytes | str) -> dict[str, str]:
    """The fields of a contribution record: r, u, q, qr, b:<board>, u:<board>, with
    numbers as decimal text (as ``HGETALL`` of the former hash returned them)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    day, week, region, body = text.split("|", 3)
    periods = {"daily": day, "weekly": week, "monthly": day[:7], "alltime": "all"}
    fields: dict[str, str] = {}
    points = ""
    for part in body.split(";") if body else ():
        name, eq, value = part.partition("=")
        if name in ("r", "Q"):
            fields["r" if name == "r" else "qr"] = str(_from_base36(value))
        elif name in ("u", "q"):
            fields[name] = value
        elif name.startswith("^"):
            fields["u:" + long_board(name[1:], periods, region)] = value
        else:
            if eq:
                points = str(_from_base36(value))
            fields["b:" + long_board(name, periods, region)] = points
    return fields


def encode_contribution(
    fields: dict[str, Any], periods: dict[str, str], region: str
) -> str:
    """A contribution record's value from its fields (inverse of
    :func:`decode_contribution`), board names short against ``periods``/``region``
    (``{}`` and ``""``: rolling boards keep their full ids)."""
    parts = [f"r={base36(int(fields['r']))}"]
    if "u" in fields:
        parts.append(f"u={fields['u']}")
    if "q" in fields:
        parts.append(f"q={fields['q']}")
    if "qr" in fields:
        parts.append(f"Q={base36(int(fields['qr']))}")
    # Boards in the order they entered the record (the fields' order), as
    # apply_event.lua writes them.
    previous = None
    for name in [n for n in fields if n.startswith("b:")]:
        board = short_board(name[2:], periods, region)
        points = base36(int(fields[name]))
        parts.append(board if points == previous else f"{board}={points}")
        previous = points
    for name in [n for n in fields if n.startswith("u:")]:
        parts.append(f"^{short_board(name[2:], periods, region)}={fields[name]}")
    return record_context(periods, region) + "|" + ";".join(parts)
