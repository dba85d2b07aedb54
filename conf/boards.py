"""Boards: the YAML boards file validated into models, and which boards an event feeds.

A board id is ``<window>:<period>:<scope>`` (API.md). Daily, ISO-weekly, monthly and
all-time boards exist for ``global`` and each region (``aggregation: sum``, ``order:
desc`` unless the ``windows:`` block says otherwise); seasons come from the boards file.

:func:`board_rules` is the one home of a board's scoring rules (aggregation, order,
tie-break, rank, rule version): every layer asks it.

Orientation: an ``order: asc`` board (lower is better) is kept internally under its
*oriented* score, ``-score`` (``score`` on ``desc`` boards), so every sorted structure
(Redis totals, changed-sets and Fenwick trees, generation segments, Spark orderings)
ranks "higher is better" unchanged, and ``aggregation: max`` of oriented
contributions is the best match under either order. :meth:`BoardRules.orient` turns
a contribution into the oriented one (contribution in) and the same function turns
an oriented score back into the real one (score out): negation is its own inverse.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from conf.periods import period_ids
from conf.rules import RULE_VERSIONS

SCOPE_GLOBAL = "global"
# API.md "Games": a boards file without ``games:`` is the one game ``default``.
DEFAULT_GAME = "default"
GAME_ID_PATTERN = r"^[a-z0-9-]{1,32}$"
GAME_ID = re.compile(GAME_ID_PATTERN)
# Internal board ids of a game other than ``default`` are ``<game>~<board>``: ``~`` is
# in no game id and no board id (ID_PATTERN, periods), and safe in Redis keys, file
# names, URLs and Delta partition values. The game ``default`` keeps the bare ids, so
# data written before games existed is the game ``default``'s unchanged.
GAME_SEP = "~"
DEFAULT_WINDOW_LATENESS = timedelta(hours=1)
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
KNOWN_RULES = set(RULE_VERSIONS)


class BoardsFileError(ValueError):
    """The boards file is unreadable or invalid; the message names the bad field."""


class Tier(BaseModel):
    """An award tier: the players ranked ``top`` or better, or within ``topPercent``
    (``100 * rank / population <= topPercent``, the read API's ``topPercent``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(pattern=ID_PATTERN)
    top: int | None = Field(default=None, ge=1)
    top_percent: float | None = Field(alias="topPercent", default=None, gt=0, le=100)

    @model_validator(mode="after")
    def _one_criterion(self) -> Tier:
        if (self.top is None) == (self.top_percent is None):
            raise ValueError("a tier needs exactly one of top or topPercent")
        return self

    def holds(self, rank: int, population: int) -> bool:
        if self.top is not None:
            return rank <= self.top
        assert self.top_percent is not None
        # Exact in rationals: rank / population <= p / 100.
        return rank * 100 <= Fraction(str(self.top_percent)) * population


Aggregation = Literal["sum", "max"]
Order = Literal["desc", "asc"]


def _aggregation_alias(value: object) -> object:
    """``best`` is another name for ``max`` (the best single match)."""
    return "max" if value == "best" else value


class WindowOptions(BaseModel):
    """Options of one rolling window (``windows: {daily: {aggregation: max}}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    aggregation: Aggregation = "sum"
    order: Order = "desc"

    @field_validator("aggregation", mode="before")
    @classmethod
    def _alias(cls, value: object) -> object:
        return _aggregation_alias(value)


class Windows(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    daily: WindowOptions = WindowOptions()
    weekly: WindowOptions = WindowOptions()
    monthly: WindowOptions = WindowOptions()
    alltime: WindowOptions = WindowOptions()

    def of(self, window: str) -> WindowOptions:
        return getattr(self, window)  # type: ignore[no-any-return]


class Season(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    id: str = Field(pattern=ID_PATTERN)
    start: datetime
    end: datetime
    allowed_lateness: timedelta = Field(alias="allowedLateness", default=timedelta(0))
    aggregation: Aggregation = "sum"
    # desc: higher scores are better; asc: lower ones (e.g. a race time).
    order: Order = "desc"
    # player_id: ties in display order by player id; first_achieved: by the time the
    # player reached the score (occurredAt of the event that set it), then player id.
    tie_break: Literal["player_id", "first_achieved"] = Field(
        alias="tieBreak", default="player_id"
    )
    # competition: 1 + players with a strictly greater score (ties share a rank);
    # unique: the display position (ties broken by the display order).
    rank: Literal["competition", "unique"] = "competition"
    rule: str = "v1"
    # Award tiers, best first; a player gets the first tier that holds its rank.
    tiers: list[Tier] = Field(default_factory=list)

    @field_validator("aggregation", mode="before")
    @classmethod
    def _alias(cls, value: object) -> object:
        return _aggregation_alias(value)

    @model_validator(mode="after")
    def _check(self) -> Season:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("start and end need a UTC offset (e.g. ...Z)")
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if self.allowed_lateness < timedelta(0):
            raise ValueError("allowedLateness must not be negative")
        if self.rule not in KNOWN_RULES:
            raise ValueError(f"unknown scoring rule {self.rule!r}")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError("tier names must be distinct")
        return self

    def tier_of(self, rank: int, population: int) -> str | None:
        """The first (best) tier holding ``rank``; None when no tier does."""
        for tier in self.tiers:
            if tier.holds(rank, population):
                return tier.name
        return None

    @property
    def cutoff(self) -> datetime:
        """Processing time after which events get ``late-review`` for this season."""
        return self.end + self.allowed_lateness


class BoardsConfig(BaseModel):
    """One game's boards (a boards file without ``games:``, or one item of it); the
    root of a file with ``games:`` holds only ``games`` (:meth:`game` gives each)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    regions: list[str] = Field(default_factory=list)
    seasons: list[Season] = Field(default_factory=list)
    # Scoring rule of the daily, weekly, monthly and all-time boards (seasons name
    # their own).
    rule: str = "v1"
    # Daily, weekly and monthly boards close at their period's end plus this.
    window_lateness: timedelta = Field(
        alias="windowLateness", default=DEFAULT_WINDOW_LATENESS
    )
    # Aggregation and order of the daily, weekly, monthly and all-time boards.
    windows: Windows = Windows()
    # API.md "Games": each item is one game's section (``id`` plus the keys above).
    games: list[GameBoards] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> BoardsConfig:
        if self.games:
            if "id" in type(self).model_fields:  # an item of games: (GameBoards)
                raise ValueError("a game cannot list games")
            others = self.model_fields_set - {"games"}
            if others:
                raise ValueError(
                    "with games:, every key goes under its game's item; found "
                    + ", ".join(sorted(others))
                )
            ids = [g.id for g in self.games]
            if len(set(ids)) != len(ids):
                raise ValueError("game ids must be distinct")
        for region in self.regions:
            if not re.match(ID_PATTERN, region) or region == SCOPE_GLOBAL:
                raise ValueError(f"invalid region {region!r}")
        if len(set(self.regions)) != len(self.regions):
            raise ValueError("regions must be distinct")
        ids = [s.id for s in self.seasons]
        if len(set(ids)) != len(ids):
            raise ValueError("season ids must be distinct")
        if self.rule not in KNOWN_RULES:
            raise ValueError(f"unknown scoring rule {self.rule!r}")
        if self.window_lateness < timedelta(0):
            raise ValueError("windowLateness must not be negative")
        return self

    @property
    def window_lateness_ms(self) -> int:
        return int(self.window_lateness.total_seconds() * 1000)

    @property
    def scopes(self) -> list[str]:
        return [SCOPE_GLOBAL, *self.regions]

    def season(self, season_id: str) -> Season | None:
        return next((s for s in self.seasons if s.id == season_id), None)

    @property
    def game_ids(self) -> list[str]:
        """The games served, in file order (``[default]`` without ``games:``)."""
        return [g.id for g in self.games] if self.games else [DEFAULT_GAME]

    def game(self, game_id: str) -> BoardsConfig | None:
        """One game's boards; None for a game the file does not list."""
        if not self.games:
            return self if game_id == DEFAULT_GAME else None
        return next((g for g in self.games if g.id == game_id), None)

    def each_game(self) -> list[tuple[str, BoardsConfig]]:
        """(game id, its boards) of every game served."""
        if not self.games:
            return [(DEFAULT_GAME, self)]
        return [(g.id, g) for g in self.games]


class GameBoards(BoardsConfig):
    """One item of ``games:``: a game id and that game's boards keys."""

    id: str = Field(pattern=GAME_ID_PATTERN)


BoardsConfig.model_rebuild()


def qualify(game: str, board: str) -> str:
    """The internal id of ``game``'s board ``board`` (bare for the game default)."""
    return board if game == DEFAULT_GAME else f"{game}{GAME_SEP}{board}"


def split_board(board: str) -> tuple[str, str]:
    """(game, board as the game's users name it) of an internal board id."""
    if GAME_SEP not in board:
        return DEFAULT_GAME, board
    game, _, bare = board.partition(GAME_SEP)
    return game, bare


def board_label(board: str) -> dict[str, str]:
    """How an answer names an internal board id: the board as its game's clients
    name it, and ``game`` for a game other than ``default``."""
    if GAME_SEP not in board:
        return {"board": board}
    game, bare = split_board(board)
    return {"board": bare, "game": game}


def game_of_board(config: BoardsConfig, board: str) -> tuple[BoardsConfig | None, str]:
    """The boards of an internal board id's game (None: no such game) and the bare
    id."""
    if GAME_SEP not in board and not config.games:
        return config, board
    game, bare = split_board(board)
    return config.game(game), bare


def resolve_season(config: BoardsConfig, season_id: str) -> Season | None:
    """The season of an internal season id: ``S4`` of the game default, or
    ``<game>~S4`` (:func:`qualify`) of another game, then with that id (what names
    its award snapshots and late-review queue)."""
    boards, bare = game_of_board(config, season_id)
    season = boards.season(bare) if boards is not None else None
    if season is None or bare == season_id:
        return season
    return season.model_copy(update={"id": season_id})


def season_board_prefix(season_id: str) -> str:
    """``season:<S>:`` of an internal season id, within its game (``arena~S4`` ->
    ``arena~season:S4:``)."""
    game, bare = split_board(season_id)
    return qualify(game, f"season:{bare}:")


def game_seasons(config: BoardsConfig) -> list[tuple[str, Season]]:
    """(game, season) of every game's seasons."""
    return [(g, s) for g, boards in config.each_game() for s in boards.seasons]


def load_boards(path: Path | None = None) -> BoardsConfig:
    """Read and validate a boards file (the packaged default when ``path`` is None)."""
    try:
        if path is None:
            text = resources.files("conf").joinpath("boards.yaml").read_text()
        else:
            text = Path(path).read_text()
        raw = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BoardsFileError(f"boards file {path}: {exc}") from exc
    try:
        return BoardsConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise BoardsFileError(
            f"boards file {path or 'default'}: field {field}: {first['msg']}"
        ) from exc


@dataclass(frozen=True, slots=True)
class BoardRules:
    """A board's scoring rules, from :func:`board_rules` (the one place that reads
    them off the boards file)."""

    aggregation: Aggregation = "sum"
    order: Order = "desc"
    tie_break: Literal["player_id", "first_achieved"] = "player_id"
    rank: Literal["competition", "unique"] = "competition"
    rule: str = "v1"

    @property
    def sign(self) -> int:
        """1 on ``desc`` boards, -1 on ``asc`` ones: oriented = sign * score."""
        return -1 if self.order == "asc" else 1

    def orient(self, value: int) -> int:
        """Contribution in, score out: the oriented value of a real one and the real
        value of an oriented one (the same negation on ``asc`` boards)."""
        return -value if self.order == "asc" else value

    @property
    def first_achieved(self) -> bool:
        return self.tie_break == "first_achieved"

    @property
    def unique_rank(self) -> bool:
        return self.rank == "unique"


DEFAULT_RULES = BoardRules()


def season_rules(season: Season) -> BoardRules:
    return BoardRules(
        season.aggregation, season.order, season.tie_break, season.rank, season.rule
    )


def window_rules(config: BoardsConfig, window: str) -> BoardRules:
    options = config.windows.of(window)
    return BoardRules(options.aggregation, options.order, rule=config.rule)


def board_rules(config: BoardsConfig, board: str) -> BoardRules:
    """The scoring rules of a board id: its season's (a replay's board
    ``season:<S>@<R>:<scope>`` has season S's under rule R) or its rolling window's;
    the defaults for an id that names no board."""
    game, board = game_of_board(config, board)
    match = BOARD_ID.match(board)
    if not match or game is None:
        return DEFAULT_RULES
    config = game
    window, period = match["window"], match["period"]
    if window == "season":
        season_id, at, rule = period.partition("@")
        season = config.season(season_id)
        if season is None:
            return DEFAULT_RULES
        rules = season_rules(season)
        if at:
            rules = BoardRules(
                rules.aggregation, rules.order, rules.tie_break, rules.rank, rule
            )
        return rules
    return window_rules(config, window)


def board_order(config: BoardsConfig, board: str) -> tuple[bool, bool]:
    """(first_achieved, unique_rank) of a board id; rolling windows are (False,
    False)."""
    rules = board_rules(config, board)
    return rules.first_achieved, rules.unique_rank


@dataclass(frozen=True, slots=True)
class BoardSpec:
    """One board an event touches, with what the speed layer needs to apply it."""

    board: str
    aggregation: str
    # Processing-time cutoff in epoch ms (season boards); 0 when the board never closes.
    cutoff_ms: int
    # Scoring rule version whose points this board takes (conf/rules.py).
    rule: str = "v1"
    # "asc": lower is better; the board keeps oriented scores (BoardRules.orient).
    order: str = "desc"

    @property
    def sign(self) -> int:
        return -1 if self.order == "asc" else 1


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def boards_for_event(
    config: BoardsConfig, occurred_at: datetime, region: str, game: str = DEFAULT_GAME
) -> list[BoardSpec]:
    """Every board of ``game`` whose window holds ``occurred_at`` and whose scope
    matches (internal ids, :func:`qualify`)."""
    if config.games or game != DEFAULT_GAME:
        found = config.game(game)
        if found is None:
            return []
        own = boards_for_event(found, occurred_at, region)
        if game == DEFAULT_GAME:
            return own
        return [
            BoardSpec(
                qualify(game, b.board), b.aggregation, b.cutoff_ms, b.rule, b.order
            )
            for b in own
        ]
    moment = occurred_at.astimezone(UTC)
    lateness_ms = config.window_lateness_ms
    day = moment.date()
    # (window, period, cutoff): rolling windows close at period end + lateness.
    periods = [
        (
            window,
            period,
            0 if window == "alltime" else period_end_ms(window, day) + lateness_ms,
        )
        for window, period in period_ids(moment)
    ]
    specs: list[BoardSpec] = []
    for season in config.seasons:
        if season.start <= moment < season.end:
            for scope in (SCOPE_GLOBAL, region):
                specs.append(
                    BoardSpec(
                        f"season:{season.id}:{scope}",
                        season.aggregation,
                        to_ms(season.cutoff),
                        season.rule,
                        season.order,
                    )
                )
    for window, period, cutoff_ms in periods:
        options = config.windows.of(window)
        for scope in (SCOPE_GLOBAL, region):
            specs.append(
                BoardSpec(
                    f"{window}:{period}:{scope}",
                    options.aggregation,
                    cutoff_ms,
                    config.rule,
                    options.order,
                )
            )
    return specs


def period_end(window: str, day: date) -> datetime:
    """UTC end (exclusive) of the daily/weekly/monthly period holding ``day``."""
    if window == "daily":
        end = day + timedelta(days=1)
    elif window == "weekly":
        end = day + timedelta(days=7 - day.weekday())  # next ISO Monday
    elif window == "monthly":
        end = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    else:
        raise ValueError(f"{window} boards have no period end")
    return datetime(end.year, end.month, end.day, tzinfo=UTC)


EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
MS_PER_DAY = 86_400_000


def period_end_ms(window: str, day: date) -> int:
    """:func:`period_end` in epoch ms, by integer day arithmetic: defined for every
    date (the end of 9999-12-31 is past ``datetime.max``), as Spark computes it."""
    if window == "daily":
        end = day.toordinal() + 1
    elif window == "weekly":
        end = day.toordinal() + 7 - day.weekday()
    elif window == "monthly":
        end = (
            day.replace(day=1).toordinal() + calendar.monthrange(day.year, day.month)[1]
        )
    else:
        raise ValueError(f"{window} boards have no period end")
    return (end - EPOCH_ORDINAL) * MS_PER_DAY


def period_start(window: str, period: str) -> date:
    """First UTC day of a rolling window's period id (validated by BOARD_ID)."""
    if window == "daily":
        return date.fromisoformat(period)
    if window == "weekly":
        year, week = period.split("-W")
        return date.fromisocalendar(int(year), int(week), 1)
    if window == "monthly":
        year, month = period.split("-")
        return date(int(year), int(month), 1)
    raise ValueError(f"{window} boards have no period")


def board_closes_at(config: BoardsConfig, board: str) -> datetime | None:
    """When a board closes (season: end + allowedLateness; rolling window: period end
    + windowLateness); None for all-time boards and unknown ids."""
    game, board = game_of_board(config, board)
    match = BOARD_ID.match(board)
    if not match or game is None:
        return None
    config = game
    window, period = match["window"], match["period"]
    if window == "alltime":
        return None
    if window == "season":
        season = config.season(period)
        return season.cutoff if season else None
    try:
        start = period_start(window, period)
    except ValueError:
        return None
    try:
        return period_end(window, start) + config.window_lateness
    except OverflowError:  # the last periods of year 9999 never close
        return None


def board_cutoff_ms(config: BoardsConfig, board: str) -> int:
    """:func:`board_closes_at` in epoch ms, 0 when the board never closes; the same
    cutoff :func:`boards_for_event` gives the board."""
    game, board = game_of_board(config, board)
    if game is None:
        return 0
    config = game
    match = BOARD_ID.match(board)
    if match and match["window"] in ("daily", "weekly", "monthly"):
        try:
            start = period_start(match["window"], match["period"])
        except ValueError:
            return 0
        return period_end_ms(match["window"], start) + config.window_lateness_ms
    closes = board_closes_at(config, board)
    return 0 if closes is None else to_ms(closes)


BOARD_ID = re.compile(
    r"^(?P<window>season|daily|weekly|monthly|alltime):(?P<period>[^:]+):(?P<scope>[^:]+)$"
)
PERIOD_PATTERNS = {
    "daily": re.compile(r"^\d{4}-\d{2}-\d{2}$"),
    "weekly": re.compile(r"^\d{4}-W\d{2}$"),
    "monthly": re.compile(r"^\d{4}-\d{2}$"),
    "alltime": re.compile(r"^all$"),
}


def valid_period(window: str, period: str) -> bool:
    """True when ``period`` names a real UTC day, ISO week or month (or ``all``).

    ``daily:2026-13-45`` matches the shape but is no day: such a board cannot exist.
    """
    pattern = PERIOD_PATTERNS.get(window)
    if pattern is None or not pattern.match(period):
        return False
    try:
        if window == "daily":
            date.fromisoformat(period)
        elif window == "weekly":
            # fromisocalendar refuses week 53 of a year that has only 52.
            date.fromisocalendar(int(period[:4]), int(period[6:]), 1)
        elif window == "monthly":
            date(int(period[:4]), int(period[5:]), 1)
    except ValueError:
        return False
    return True


def describe_board(config: BoardsConfig, board: str) -> dict[str, str] | None:
    """Window, scope, aggregation, order, tie-break of a board id; None if it cannot
    exist."""
    game, board = game_of_board(config, board)
    match = BOARD_ID.match(board)
    if not match or game is None:
        return None
    config = game
    window, period, scope = match["window"], match["period"], match["scope"]
    if scope not in config.scopes:
        return None
    if window == "season":
        season = config.season(period)
        if season is None:
            return None
        return {
            "window": window,
            "period": period,
            "scope": scope,
            "aggregation": season.aggregation,
            "order": season.order,
            "tieBreak": season.tie_break,
            "rule": season.rule,
        }
    if not valid_period(window, period):
        return None
    return {
        "window": window,
        "period": period,
        "scope": scope,
        "aggregation": config.windows.of(window).aggregation,
        "order": config.windows.of(window).order,
        "tieBreak": "player_id",
        "rule": config.rule,
    }


def season_cutoffs_ms(config: BoardsConfig) -> dict[str, int]:
    """Board id -> processing-time cutoff (epoch ms) for every season board of
    every game (internal ids)."""
    return {
        qualify(game, f"season:{s.id}:{scope}"): to_ms(s.cutoff)
        for game, boards in config.each_game()
        for s in boards.seasons
        for scope in boards.scopes
    }
