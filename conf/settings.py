"""Runtime settings: every ``LB_`` environment variable of API.md, validated once."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

LOCAL_DEV_KEYS = "dev:dev-secret"
# 32 bytes: RFC 7518 wants an HS256 key at least as long as the hash.
LOCAL_PLAYER_TOKEN_KEY = "dev-player-token-key-0123456789ab"
# Local default admin key (signs /v1/admin/* calls); refused outside local use.
LOCAL_DEV_ADMIN_KEYS = "admin:dev-admin-secret"
ENV_PREFIX = "LB_"


class SettingsError(ValueError):
    """An ``LB_*`` variable is invalid; the message names the variable."""


def default_api_workers() -> int:
    """One API worker per core this process may run on (at most 64)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(64, cores))


# API.md "Games": ``keyId:secret@arena+duel`` may write only the games it names.
_KEY_GAMES = re.compile(r"@([a-z0-9-]{1,32}(?:\+[a-z0-9-]{1,32})*)$")


def split_key_games(secret: str) -> tuple[str, frozenset[str] | None]:
    """(secret, the games it may write or None for every game) of an LB_HMAC_KEYS
    entry's secret part."""
    match = _KEY_GAMES.search(secret)
    if match is None or match.start() == 0:
        return secret, None
    return secret[: match.start()], frozenset(match[1].split("+"))


def _parse_keys(value: str, variable: str) -> dict[str, bytes]:
    """``keyId:secret[,keyId:secret]`` -> {keyId: secret bytes}."""
    keys: dict[str, bytes] = {}
    for item in value.split(","):
        key_id, sep, secret = item.strip().partition(":")
        if not sep or not key_id or not secret:
            raise ValueError(f"{variable} must be 'keyId:secret[,keyId:secret]'")
        keys[key_id] = secret.encode()
    return keys


class Settings(BaseSettings):
    """All configuration of one process; read from ``LB_*`` variables."""

    model_config = SettingsConfigDict(env_prefix="LB_", extra="ignore")

    data_dir: Path = Path(".lb")
    redis_url: str | None = None
    boards_file: Path | None = None
    hmac_keys: str = LOCAL_DEV_KEYS
    # Keys of operators for /v1/admin/* (same signature scheme as writes); a key id
    # may not be both a game-server and an admin key.
    admin_keys: str = LOCAL_DEV_ADMIN_KEYS
    partitions: int = Field(default=8, ge=1, le=4096)
    rate_limit: str = "5/60"
    # Per signing key (X-Key-Id), the same accounting as rate_limit; off by default:
    # one game-server key carries a whole fleet's matches.
    key_rate_limit: str = "off"
    retained_generations: int = Field(default=3, ge=1)
    # Layered generations (serving/layers.py): an incremental publish writes a
    # touched board's changed rows as a layer over its parent until the chain's
    # layer rows would pass this fraction of the base's rows or the chain this many
    # layers; then it compacts (writes a full base). Gold in Delta layers with the
    # same chain limit (jobs/incremental.py next_gold_chain). 0 layers: off (every
    # touched board is written in full, gold re-ranks the touched boards). On by
    # default: DESIGN.md's "a generation is a base plus layers"; 5 layers is the
    # chain whose reads bench/RESULTS.md measured within 10 % of a compacted board.
    layers_max_fraction: float = Field(default=0.25, gt=0)
    layers_max_chain: int = Field(default=5, ge=0)
    # Redis AOF fsync policy for the local server `lb up` starts.
    appendfsync: str = "always"
    # Dedupe and contribution records live this long; 120 days covers a season
    # plus its lateness with room to spare.
    retention_seconds: int = Field(default=120 * 24 * 3600, ge=60)
    # ISO-8601 duration (API.md): an occurredAt older than now minus this is refused
    # with too_old, so an event can never outlive its dedupe record.
    dedupe_window: timedelta = timedelta(days=30)
    # Bounds of scoring rule v1 (result.points).
    points_min: int = 0
    points_max: int = 1_000_000
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    max_batch_events: int = 1000
    # Group commit of concurrent single POSTs (speed/store.py): 0 sends a group as
    # soon as the previous one is answered, > 0 also waits this many µs first, -1
    # sends every call alone. bench/RESULTS.md has the measurements behind 0.
    group_commit_us: int = Field(default=0, ge=-1, le=100_000)
    # Replicas that must acknowledge an owner transaction (Redis WAIT on the master
    # that ran it) before the event is acknowledged; fewer within the timeout: 503
    # (outcome unknown, redelivery safe). 0: no WAIT (replication is asynchronous,
    # docs/CAPACITY.md section 5).
    replica_acks: int = Field(default=0, ge=0, le=16)
    replica_ack_timeout_ms: int = Field(default=1000, ge=1, le=60_000)
    signature_window_seconds: int = 300
    max_future_seconds: int = 300
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # uvicorn worker processes of `lb up` (default: one per core); they share the
    # memory-mapped segments through the page cache, metrics sum over them.
    api_workers: int = Field(default_factory=default_api_workers, ge=1, le=64)
    # `lb up`'s supervisor restarts a Redis or API process that dies; more than
    # this many restarts of one process within this many seconds stop the stack
    # (``restarts/seconds``; README "Running locally").
    restart_limit: str = "5/60"
    # Seconds the API waits for Redis to connect / to answer a command before it
    # treats Redis as unreachable: reads then answer from the latest generation,
    # writes 503 (outcome unknown). Short, so a stalled Redis costs reads little.
    redis_connect_timeout: float = Field(default=0.5, gt=0, le=60)
    redis_timeout: float = Field(default=2.0, gt=0, le=300)
    # Live top lists: how long a cached answer may be served without asking Redis
    # whether anything changed (0: every hit checks the partitions' positions, bases
    # and flags in one round trip, so a cached answer is always the current one). A
    # cached answer keeps the asOf positions it was computed at.
    live_cache_ms: int = Field(default=0, ge=0, le=60_000)
    # HS256 key of player tokens (Authorization: Bearer <JWT>, sub = playerId).
    player_token_key: str = LOCAL_PLAYER_TOKEN_KEY
    # Reads under /v1/boards and /v1/games: "open" to anyone, or "token": each needs
    # a player token or a reader token (sub = "reader:<name>"), else 401.
    read_auth: str = "open"
    # Per token subject (LB_READ_AUTH=token), the token bucket of LB_RATE_LIMIT:
    # "capacity/refillSeconds" or "off"; 429 with Retry-After.
    read_rate_limit: str = "off"
    # Most friends one player may list.
    max_friends: int = Field(default=1000, ge=1, le=100_000)
    # Quarantine: an event above this quantile of its board's and cohort's per-match
    # points is held, once a (board, cohort) has this many contributions.
    quarantine_quantile: float = Field(default=0.9999, gt=0, lt=1)
    quarantine_min_samples: int = Field(default=1000, ge=1)
    # Airflow (dags/): publish_generation runs every this many minutes.
    publish_every_minutes: int = Field(default=5, ge=1, le=1440)
    # Set by `lb up` for each start; /healthz and /readyz echo it, so `lb up` knows
    # it is talking to the API it started and not to whatever holds the port.
    instance_token: str | None = None
    # True outside local use: placeholder secrets are refused.
    production: bool = False
    # Set by `lb demo` for the API it starts: the public dev key is expected there,
    # so the start-up warning about it is left out.
    demo: bool = False

    @field_validator("appendfsync")
    @classmethod
    def _fsync_policy(cls, value: str) -> str:
        if value not in {"always", "everysec", "no"}:
            raise ValueError("LB_APPENDFSYNC must be always, everysec or no")
        return value

    @field_validator("dedupe_window")
    @classmethod
    def _window_positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("LB_DEDUPE_WINDOW must be a positive ISO-8601 duration")
        return value

    @property
    def record_ttl_seconds(self) -> int:
        """Lifetime of dedupe and contribution records: at least the dedupe window
        plus the allowed clock skew, so a redelivery accepted by the window always
        finds its record."""
        window = int(self.dedupe_window.total_seconds()) + self.max_future_seconds
        return max(self.retention_seconds, window + 3600)

    @field_validator("read_auth")
    @classmethod
    def _read_auth_mode(cls, value: str) -> str:
        if value not in {"open", "token"}:
            raise ValueError("LB_READ_AUTH must be open or token")
        return value

    @field_validator("rate_limit", "key_rate_limit", "read_rate_limit")
    @classmethod
    def _rate_limit_format(cls, value: str, info: ValidationInfo) -> str:
        if value == "off":
            return value
        try:
            capacity, refill = value.split("/")
            if int(capacity) < 1 or float(refill) <= 0:
                raise ValueError
        except ValueError:
            name = f"LB_{(info.field_name or 'rate_limit').upper()}"
            raise ValueError(
                f"{name} must be 'capacity/refillSeconds' (e.g. 5/60) or 'off'"
            ) from None
        return value

    @field_validator("restart_limit")
    @classmethod
    def _restart_limit_format(cls, value: str) -> str:
        try:
            restarts, seconds = value.split("/")
            if int(restarts) < 0 or float(seconds) <= 0:
                raise ValueError
        except ValueError:
            raise ValueError(
                "LB_RESTART_LIMIT must be 'restarts/seconds' (e.g. 5/60)"
            ) from None
        return value

    @property
    def restart_window(self) -> tuple[int, float]:
        """(restarts, seconds) of LB_RESTART_LIMIT."""
        restarts, seconds = self.restart_limit.split("/")
        return int(restarts), float(seconds)

    @field_validator("hmac_keys")
    @classmethod
    def _keys_format(cls, value: str) -> str:
        for item in value.split(","):
            key_id, sep, secret = item.strip().partition(":")
            if not sep or not key_id or not secret:
                raise ValueError("LB_HMAC_KEYS must be 'keyId:secret[,keyId:secret]'")
        return value

    @model_validator(mode="after")
    def _no_dev_key_in_production(self) -> Settings:
        # Refused at start-up, not at the first write: a service that starts and then
        # answers 500 to every write is worse than one that does not start.
        if self.production and self.uses_dev_key:
            raise ValueError(
                f"LB_PRODUCTION=true: the public development key {LOCAL_DEV_KEYS!r} "
                "in LB_HMAC_KEYS is refused; set LB_HMAC_KEYS to your own "
                "keyId:secret pairs"
            )
        if self.production and self.admin_keys == LOCAL_DEV_ADMIN_KEYS:
            raise ValueError(
                f"LB_PRODUCTION=true: the public development admin key "
                f"{LOCAL_DEV_ADMIN_KEYS!r} in LB_ADMIN_KEYS is refused; set "
                "LB_ADMIN_KEYS to your own keyId:secret pairs"
            )
        if self.production and self.player_token_key == LOCAL_PLAYER_TOKEN_KEY:
            # Else every read carrying a bearer header, nearby and friends answer
            # 500 (player_token_secret refuses it) on a stack that started.
            raise ValueError(
                "LB_PRODUCTION=true: the local development player-token key in "
                "LB_PLAYER_TOKEN_KEY is refused; set LB_PLAYER_TOKEN_KEY to your own "
                "HS256 key (at least 32 bytes)"
            )
        return self

    @model_validator(mode="after")
    def _read_limit_needs_tokens(self) -> Settings:
        # The bucket is per token subject: open reads have none to count against.
        if self.read_rate_limit != "off" and self.read_auth != "token":
            raise ValueError(
                "LB_READ_RATE_LIMIT limits each token subject, so it needs "
                "LB_READ_AUTH=token (or set LB_READ_RATE_LIMIT=off)"
            )
        return self

    @property
    def uses_dev_key(self) -> bool:
        """True when LB_HMAC_KEYS accepts the public development key."""
        return any(item.strip() == LOCAL_DEV_KEYS for item in self.hmac_keys.split(","))

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def signing_keys(self) -> dict[str, bytes]:
        keys = {}
        for item in self.hmac_keys.split(","):
            key_id, _, secret = item.strip().partition(":")
            keys[key_id] = split_key_games(secret)[0].encode()
        if self.production and self.hmac_keys == LOCAL_DEV_KEYS:
            raise ValueError("the local dev HMAC key is refused outside local use")
        return keys

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def key_games(self) -> dict[str, frozenset[str]]:
        """Key id -> the games it may write, for the LB_HMAC_KEYS entries that name
        games (``keyId:secret@arena+duel``); a key not here may write every game."""
        games = {}
        for item in self.hmac_keys.split(","):
            key_id, _, secret = item.strip().partition(":")
            named = split_key_games(secret)[1]
            if named is not None:
                games[key_id] = named
        return games

    @property
    def player_token_secret(self) -> bytes:
        if self.production and self.player_token_key == LOCAL_PLAYER_TOKEN_KEY:
            raise ValueError("the local player-token key is refused outside local use")
        return self.player_token_key.encode()

    @field_validator("admin_keys")
    @classmethod
    def _admin_keys_format(cls, value: str) -> str:
        _parse_keys(value, "LB_ADMIN_KEYS")
        return value

    @model_validator(mode="after")
    def _keys_disjoint(self) -> Settings:
        shared = set(_parse_keys(self.hmac_keys, "LB_HMAC_KEYS")) & set(
            _parse_keys(self.admin_keys, "LB_ADMIN_KEYS")
        )
        if shared:
            raise ValueError(
                "LB_ADMIN_KEYS and LB_HMAC_KEYS share key ids: "
                + ", ".join(sorted(shared))
            )
        return self

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def admin_signing_keys(self) -> dict[str, bytes]:
        """Admin key id -> secret (LB_ADMIN_KEYS)."""
        if self.production and self.admin_keys == LOCAL_DEV_ADMIN_KEYS:
            raise ValueError("the local dev admin key is refused outside local use")
        return _parse_keys(self.admin_keys, "LB_ADMIN_KEYS")

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def rate_limit_bucket(self) -> tuple[int, float] | None:
        """(capacity, refillSeconds) of the per-player bucket, None when off."""
        if self.rate_limit == "off":
            return None
        capacity, refill = self.rate_limit.split("/")
        return int(capacity), float(refill)

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def key_rate_limit_bucket(self) -> tuple[int, float] | None:
        """(capacity, refillSeconds) of each signing key's bucket, None when off."""
        if self.key_rate_limit == "off":
            return None
        capacity, refill = self.key_rate_limit.split("/")
        return int(capacity), float(refill)

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def read_rate_limit_bucket(self) -> tuple[int, float] | None:
        """(capacity, refillSeconds) of each token subject's read bucket, None: off."""
        if self.read_rate_limit == "off":
            return None
        capacity, refill = self.read_rate_limit.split("/")
        return int(capacity), float(refill)

    @property
    def redis_dir(self) -> Path:
        return self.data_dir / "redis"

    @property
    def delta_dir(self) -> Path:
        return self.data_dir / "delta"

    @property
    def segments_dir(self) -> Path:
        return self.data_dir / "segments"

    @property
    def run_dir(self) -> Path:
        return self.data_dir / "run"


def env_name(field: str) -> str:
    """The environment variable of a settings field: ``partitions`` -> LB_PARTITIONS."""
    return ENV_PREFIX + field.upper()


def describe_validation_error(exc: ValidationError) -> str:
    """One line per bad variable, named as the user sets it (``LB_PARTITIONS``)."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error.get("loc", ()) if part != "__root__"]
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if loc:
            given = error.get("input")
            shown = f" (got {given!r})" if isinstance(given, str | int | float) else ""
            name = env_name(loc[0])
            prefix = "" if message.startswith(name) else f"{name}: "
            lines.append(f"{prefix}{message}{shown}")
        else:
            # Model-level checks already name their variables.
            lines.append(message)
    return "; ".join(lines)


def load_settings(**overrides: Any) -> Settings:
    """Read and validate every ``LB_*`` variable once, at start-up.

    :raises SettingsError: naming each invalid variable (``LB_PARTITIONS: ...``).
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_validation_error(exc)) from None


def get_settings() -> Settings:
    return load_settings()
