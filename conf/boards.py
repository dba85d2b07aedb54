"""Boards: the YAML boards file validated into models, and which boards an event feeds.

A board id is ``<window>:<period>:<scope>`` (API.md). Daily, ISO-weekly, monthly and
all-time boards exist for ``global`` and each region, with ``aggregation: sum``;
seasons come from the boards file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conf.periods import period_ids
from conf.rules import RULE_VERSIONS

SCOPE_GLOBAL = "global"
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
KNOWN_RULES = set(RULE_VERSIONS)


class BoardsFileError(ValueError):
    """The boards file is unreadable or invalid; the message names the bad field."""


class Season(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    id: str = Field(pattern=ID_PATTERN)
    start: datetime
    end: datetime
    allowed_lateness: timedelta = Field(alias="allowedLateness", default=timedelta(0))
    aggregation: Literal["sum", "max"] = "sum"
    tie_break: Literal["player_id"] = Field(alias="tieBreak", default="player_id")
    rule: str = "v1"

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
        return self

    @property
    def cutoff(self) -> datetime:
        """Processing time after which events get ``late-review`` for this season."""
        return self.end + self.allowed_lateness


class BoardsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    regions: list[str] = Field(default_factory=list)
    seasons: list[Season] = Field(default_factory=list)
    # Scoring rule of the daily, weekly, monthly and all-time boards (seasons name
    # their own).
    rule: str = "v1"

    @model_validator(mode="after")
    def _check(self) -> BoardsConfig:
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
        return self

    @property
    def scopes(self) -> list[str]:
        return [SCOPE_GLOBAL, *self.regions]

    def season(self, season_id: str) -> Season | None:
        return next((s for s in self.seasons if s.id == season_id), None)


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
class BoardSpec:
    """One board an event touches, with what the speed layer needs to apply it."""

    board: str
    aggregation: str
    # Processing-time cutoff in epoch ms (season boards); 0 when the board never closes.
    cutoff_ms: int
    # Scoring rule version whose points this board takes (conf/rules.py).
    rule: str = "v1"


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def boards_for_event(
    config: BoardsConfig, occurred_at: datetime, region: str
) -> list[BoardSpec]:
    """Every board whose window holds ``occurred_at`` and whose scope matches."""
    moment = occurred_at.astimezone(UTC)
    periods = period_ids(moment)
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
                    )
                )
    for window, period in periods:
        for scope in (SCOPE_GLOBAL, region):
            specs.append(
                BoardSpec(f"{window}:{period}:{scope}", "sum", 0, config.rule)
            )
    return specs


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
    """Window, scope, aggregation, tie-break of a board id; None if it cannot exist."""
    match = BOARD_ID.match(board)
    if not match:
        return None
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
            "tieBreak": season.tie_break,
            "rule": season.rule,
        }
    if not valid_period(window, period):
        return None
    return {
        "window": window,
        "period": period,
        "scope": scope,
        "aggregation": "sum",
        "tieBreak": "player_id",
        "rule": config.rule,
    }


def season_cutoffs_ms(config: BoardsConfig) -> dict[str, int]:
    """Board id -> processing-time cutoff (epoch ms) for every season board."""
    return {
        f"season:{s.id}:{scope}": to_ms(s.cutoff)
        for s in config.seasons
        for scope in config.scopes
    }
