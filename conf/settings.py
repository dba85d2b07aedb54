"""Runtime settings: every ``LB_`` environment variable of API.md, validated once."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field, computed_field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LOCAL_DEV_KEYS = "dev:dev-secret"
# 32 bytes: RFC 7518 wants an HS256 key at least as long as the hash.
LOCAL_PLAYER_TOKEN_KEY = "dev-player-token-key-0123456789ab"


class Settings(BaseSettings):
    """All configuration of one process; read from ``LB_*`` variables."""

    model_config = SettingsConfigDict(env_prefix="LB_", extra="ignore")

    data_dir: Path = Path(".lb")
    redis_url: str | None = None
    boards_file: Path | None = None
    hmac_keys: str = LOCAL_DEV_KEYS
    partitions: int = Field(default=8, ge=1, le=4096)
    rate_limit: str = "5/60"
    retained_generations: int = Field(default=3, ge=1)
    # Redis AOF fsync policy for the local server `lb up` starts.
    appendfsync: str = "always"
    # Dedupe and contribution records live this long; 120 days covers a season
    # plus its lateness with room to spare.
    retention_seconds: int = Field(default=120 * 24 * 3600, ge=60)
    # Bounds of scoring rule v1 (result.points).
    points_min: int = 0
    points_max: int = 1_000_000
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    max_batch_events: int = 1000
    signature_window_seconds: int = 300
    max_future_seconds: int = 300
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # uvicorn worker processes of `lb up`; they share the memory-mapped segments.
    api_workers: int = Field(default=1, ge=1, le=64)
    # HS256 key of player tokens (Authorization: Bearer <JWT>, sub = playerId).
    player_token_key: str = LOCAL_PLAYER_TOKEN_KEY
    # Most friends one player may list.
    max_friends: int = Field(default=1000, ge=1, le=100_000)
    # True outside local use: placeholder secrets are refused.
    production: bool = False

    @field_validator("appendfsync")
    @classmethod
    def _fsync_policy(cls, value: str) -> str:
        if value not in {"always", "everysec", "no"}:
            raise ValueError("LB_APPENDFSYNC must be always, everysec or no")
        return value

    @field_validator("rate_limit")
    @classmethod
    def _rate_limit_format(cls, value: str) -> str:
        if value == "off":
            return value
        try:
            capacity, refill = value.split("/")
            if int(capacity) < 1 or float(refill) <= 0:
                raise ValueError
        except ValueError:
            raise ValueError(
                "LB_RATE_LIMIT must be 'capacity/refillSeconds' (e.g. 5/60) or 'off'"
            ) from None
        return value

    @field_validator("hmac_keys")
    @classmethod
    def _keys_format(cls, value: str) -> str:
        for item in value.split(","):
            key_id, sep, secret = item.strip().partition(":")
            if not sep or not key_id or not secret:
                raise ValueError("LB_HMAC_KEYS must be 'keyId:secret[,keyId:secret]'")
        return value

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def signing_keys(self) -> dict[str, bytes]:
        keys = {}
        for item in self.hmac_keys.split(","):
            key_id, _, secret = item.strip().partition(":")
            keys[key_id] = secret.encode()
        if self.production and self.hmac_keys == LOCAL_DEV_KEYS:
            raise ValueError("the local dev HMAC key is refused outside local use")
        return keys

    @property
    def player_token_secret(self) -> bytes:
        if self.production and self.player_token_key == LOCAL_PLAYER_TOKEN_KEY:
            raise ValueError("the local player-token key is refused outside local use")
        return self.player_token_key.encode()

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def rate_limit_bucket(self) -> tuple[int, float] | None:
        """(capacity, refillSeconds) of the per-player bucket, None when off."""
        if self.rate_limit == "off":
            return None
        capacity, refill = self.rate_limit.split("/")
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


def get_settings() -> Settings:
    return Settings()
