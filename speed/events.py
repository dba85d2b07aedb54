"""Score events: the validated wire model, normalization and content fingerprint,
and :func:`validate_event`, the whole check of one event the ingest path runs
(the API maps its failures to HTTP; benches and tests call it directly)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
)

from conf.boards import DEFAULT_GAME, GAME_SEP, BoardsConfig
from conf.rules import RuleInputError, RuleRegistry
from conf.settings import Settings
from speed.scoring import score_event

# The schema bounds ids loosely (a decomposed id is longer than its NFC form);
# normalize() applies API.md's rule after NFC: 1-64 letters, digits and _ - . :
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=256)]
RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)
MAX_ID_CHARS = 64
ID_PUNCTUATION = frozenset("_-.:")
ID_FIELDS = ("eventId", "playerId", "matchId")
# The common case of normalize_id's rule: an ASCII id is its own NFC form, and its
# only letters and digits are these, so this match decides it without the
# per-character Unicode lookups (a test checks both paths agree).
ASCII_ID = re.compile(rf"[A-Za-z0-9_.:\-]{{1,{MAX_ID_CHARS}}}")


BEYOND_MICROSECONDS = re.compile(r"\.(\d{6})\d+")


class EventResult(BaseModel):
    """The match record. Which fields are needed, and their bounds, is up to the
    scoring rules of the boards the event feeds (conf/rules.py)."""

    model_config = ConfigDict(extra="forbid")
    points: StrictInt | None = None
    placement: StrictInt | None = None
    kills: StrictInt | None = None
    durationSeconds: StrictInt | None = None


# The fields of a match record, in declaration order (NormalizedEvent.record).
RECORD_FIELDS = tuple(EventResult.model_fields)


class ScoreEventIn(BaseModel):
    """One match result from a trusted game server (API.md, POST /v1/score-events)."""

    model_config = ConfigDict(extra="forbid")

    eventId: Identifier
    playerId: Identifier
    matchId: Identifier
    sourceRevision: StrictInt = Field(ge=1, le=2**53)
    occurredAt: str
    region: Identifier
    result: EventResult
    kind: Literal["result", "correction"] = "result"
    reason: str | None = Field(default=None, max_length=1024)


class EventInvalid(ValueError):
    """Semantic validation failed; ``field`` names the offending field."""

    def __init__(self, field: str, message: str, *, detail: str | None = None) -> None:
        super().__init__(detail or f"{field}: {message}")
        self.field = field
        self.message = message


class TooOld(EventInvalid):
    """occurredAt is older than the dedupe window (422 ``too_old``)."""


def _id_char_ok(char: str, first: bool) -> bool:
    if char in ID_PUNCTUATION:
        return True
    category = unicodedata.category(char)
    # Letters (any script), decimal digits, and the combining marks some scripts
    # need on a letter even after NFC (e.g. Devanagari vowel signs).
    return category[0] == "L" or category == "Nd" or (category[0] == "M" and not first)


def normalize_id(field: str, value: str) -> str:
    """The NFC form of an id; raises EventInvalid naming ``field`` if it breaks the
    rule of API.md (1-64 letters, digits and ``_ - . :`` after NFC).

    NFC makes a composed and a decomposed ``José`` one player; refusing '/' and the
    like keeps every accepted id readable back through a URL path.
    """
    if value.isascii():
        if ASCII_ID.fullmatch(value):
            return value
        nfc = value
    else:
        nfc = unicodedata.normalize("NFC", value)
    if not 1 <= len(nfc) <= MAX_ID_CHARS:
        raise EventInvalid(field, f"must be 1-{MAX_ID_CHARS} characters after NFC")
    if not all(_id_char_ok(c, i == 0) for i, c in enumerate(nfc)):
        raise EventInvalid(
            field, "only letters, digits and _ - . : are allowed (after Unicode NFC)"
        )
    return nfc


def parse_rfc3339(value: str) -> datetime:
    """An RFC 3339 timestamp with offset, in UTC; ValueError if it is not one or its
    UTC instant leaves the representable range (year 1 to 9999)."""
    if not RFC3339.match(value):
        raise ValueError(
            "must be an RFC 3339 timestamp with offset, e.g. 2026-11-20T10:00:00Z"
        )
    text = value.replace("z", "Z").replace("t", "T").replace(" ", "T")
    # Python accepts at most microseconds; trim extra fractional digits.
    if "." in text:
        text = BEYOND_MICROSECONDS.sub(r".\1", text)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except (OverflowError, ValueError):
        # 9999-12-31T23:59:59-23:59 is a valid string whose UTC instant is past
        # year 9999; 2026-02-30 is not a date at all.
        raise ValueError(
            "must be a valid date and time within years 1 to 9999"
        ) from None


def canonical_time(text: str, moment: datetime) -> str:
    """occurredAt as the canonical body writes it: UTC, milliseconds, ``Z``.

    ``text`` is the wire's form of ``moment`` (parsed by :func:`parse_rfc3339`) or
    "". The forms servers send most, ``...T10:00:00Z`` and ``...T10:00:00.123Z``,
    are already UTC with whole milliseconds, so the text gives the canonical form
    without formatting the datetime (a test checks both ways agree).
    """
    if len(text) == 20 and text[19] == "Z" and text[10] == "T":
        return text[:19] + ".000Z"
    if len(text) == 24 and text[23] == "Z" and text[19] == "." and text[10] == "T":
        return text
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# The last key of every canonical body (NormalizedEvent.log_json).
SOURCE_REVISION_KEY = b',"sourceRevision":'


class NormalizedEvent:
    """A validated event with its canonical form, fingerprint and occurredAt.

    ``scores`` (points per scoring rule version) and ``limits`` (the plausibility
    bounds the owner transaction enforces) are set by the scoring step; they derive
    from the record, so they are not part of the fingerprint.
    """

    __slots__ = (
        "event",
        "occurred_at",
        "canonical",
        "fingerprint",
        "body",
        "scores",
        "limits",
        "record",
        "key_id",
        "game",
        "identity",
    )

    def __init__(
        self,
        event: ScoreEventIn,
        occurred_at: datetime,
        occurred_text: str = "",
        game: str = DEFAULT_GAME,
    ) -> None:
        """``occurred_text``: the wire's occurredAt (:func:`canonical_time` reuses
        it when it already is the canonical form). ``game``: the game the event was
        sent for (API.md "Games")."""
        self.event = event
        self.occurred_at = occurred_at
        self.game = game
        # Whose dedupe, match and rate-limit records these are: the player, within
        # its game (the same ids in two games are two players, two events).
        self.identity = (
            event.playerId
            if game == DEFAULT_GAME
            else f"{game}{GAME_SEP}{event.playerId}"
        )
        # The signing key (X-Key-Id) that sent it, for the per-key rate limit.
        self.key_id = ""
        body = {
            "eventId": event.eventId,
            "playerId": event.playerId,
            "matchId": event.matchId,
            "sourceRevision": event.sourceRevision,
            "occurredAt": canonical_time(occurred_text, occurred_at),
            "region": event.region,
            "points": event.result.points,
            "kind": event.kind,
            "reason": event.reason,
        }
        result = event.result
        # The match record's fields (None when absent): what result.model_dump()
        # gives, without pydantic's serializer per event.
        self.record: dict[str, int | None] = {
            name: getattr(result, name) for name in RECORD_FIELDS
        }
        # Record fields beyond points only when present: a points-only event keeps
        # the fingerprint it had before rules could read other fields.
        for name, value in self.record.items():
            if name != "points" and value is not None:
                body[name] = value
        # The game only when not default: an event of the game default keeps the
        # fingerprint and log record it had before games existed.
        if game != DEFAULT_GAME:
            body["game"] = game
        self.body = body
        self.canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        self.fingerprint = hashlib.blake2b(self.canonical, digest_size=12).hexdigest()
        self.scores: dict[str, int] = {}
        self.limits: tuple[int, int] = (0, 0)

    @property
    def points(self) -> int:
        """The ``points`` field (0 when the record has none): what bronze's ``points``
        column holds; the contribution to a board is ``scores[<board's rule>]``."""
        return self.event.result.points or 0

    def log_json(self) -> bytes:
        """The event as written to the partition log: the canonical body plus the
        points under every rule its boards use (the rule version is the key), keys
        sorted: ``orjson.dumps({**body, "scores": scores}, OPT_SORT_KEYS)``.

        Built from the canonical bytes instead of dumping the body again: of the
        body's keys, ``sourceRevision`` alone sorts after ``scores``, so the scores
        go just before it. ``,"sourceRevision":`` occurs once in the canonical
        bytes: inside a JSON string a quote is escaped, so no string holds ``,"``.
        (A test checks this equals the plain dump.)
        """
        canonical = self.canonical
        at = canonical.rindex(SOURCE_REVISION_KEY)
        scores = orjson.dumps(self.scores, option=orjson.OPT_SORT_KEYS)
        return b"".join((canonical[:at], b',"scores":', scores, canonical[at:]))


# Keys of a logged event that are not part of its canonical form (derived from it).
LOG_ONLY_FIELDS = frozenset({"scores"})


def fingerprint_of_logged(logged: dict[str, object]) -> str:
    """The fingerprint of an event as logged by :meth:`NormalizedEvent.log_json`:
    the canonical body is the logged one without the derived fields."""
    body = {k: v for k, v in logged.items() if k not in LOG_ONLY_FIELDS}
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=12).hexdigest()


def normalize(
    event: ScoreEventIn,
    *,
    regions: list[str],
    now: datetime,
    max_future: timedelta,
    dedupe_window: timedelta | None = None,
    game: str = DEFAULT_GAME,
) -> NormalizedEvent:
    """Check what the schema cannot (id alphabet, clock); normalize ids to NFC and
    occurredAt to UTC. The record's bounds belong to the scoring rules
    (conf/rules.py)."""
    ids = {name: normalize_id(name, getattr(event, name)) for name in ID_FIELDS}
    if any(ids[name] != getattr(event, name) for name in ID_FIELDS):
        event = event.model_copy(update=ids)
    if event.region not in regions:
        raise EventInvalid(
            "region", f"unknown region; configured: {', '.join(regions)}"
        )
    if event.kind == "correction" and not (event.reason and event.reason.strip()):
        raise EventInvalid("reason", "required for corrections")
    try:
        occurred_at = parse_rfc3339(event.occurredAt)
    except ValueError as exc:
        raise EventInvalid("occurredAt", str(exc)) from None
    if occurred_at > now + max_future:
        raise EventInvalid(
            "occurredAt", f"more than {int(max_future.total_seconds())} s in the future"
        )
    oldest = datetime.min.replace(tzinfo=UTC)
    if dedupe_window is not None:
        try:
            oldest = now - dedupe_window
        except OverflowError:  # a window reaching before year 1 bounds nothing
            pass
    if occurred_at < oldest:
        # Its dedupe record may be gone: accepting it could count it twice.
        raise TooOld("occurredAt", f"older than the dedupe window ({dedupe_window})")
    return NormalizedEvent(event, occurred_at, event.occurredAt, game)


def validate_event(
    raw: object,
    settings: Settings,
    boards: BoardsConfig,
    now: datetime,
    rules: RuleRegistry,
    game: str = DEFAULT_GAME,
) -> NormalizedEvent:
    """Schema, semantic and scoring-rule checks of one wire event for ``game`` (a
    game ``boards`` serves), then its scores.

    :raises TooOld: occurredAt is older than the dedupe window.
    :raises EventInvalid: anything else wrong with the event; ``field`` names it
        (``body`` when it is not a JSON object).
    :raises conf.rules.Implausible: beyond a plausibility bound of a rule.
    """
    if not isinstance(raw, dict):
        raise EventInvalid(
            "body", "not a JSON object", detail="an event must be a JSON object"
        )
    try:
        event = ScoreEventIn.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise EventInvalid(field, first["msg"]) from None
    own = boards.game(game) if boards.games or game != DEFAULT_GAME else boards
    if own is None:
        raise EventInvalid("game", f"unknown game {game!r}")
    normalized = normalize(
        event,
        regions=own.regions,
        now=now,
        max_future=timedelta(seconds=settings.max_future_seconds),
        dedupe_window=settings.dedupe_window,
        game=game,
    )
    try:
        return score_event(normalized, own, rules)
    except RuleInputError as exc:
        raise EventInvalid(exc.field, exc.message) from None
