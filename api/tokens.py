"""Player tokens: ``Authorization: Bearer <JWT>``, HS256 with ``LB_PLAYER_TOKEN_KEY``,
``sub`` = playerId, ``exp`` required (API.md). Verified with PyJWT."""

from __future__ import annotations

import time

import jwt

from api.errors import Forbidden, Unauthorized

ALGORITHM = "HS256"


def issue_player_token(secret: bytes, player_id: str, ttl_seconds: int = 3600) -> str:
    """A token for ``player_id`` (what a game's login service would hand out)."""
    now = int(time.time())
    payload = {"sub": player_id, "iat": now, "exp": now + ttl_seconds}
    return jwt.encode(payload, secret, algorithm=ALGORITHM)


def player_of(authorization: str, secret: bytes) -> str:
    """The player a bearer token names (its ``sub``).

    :raises Unauthorized: not ``Bearer <JWT>``, not a valid token, or expired (401).
    """
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization must be 'Bearer <JWT>'")
    try:
        claims = jwt.decode(
            token.strip(),
            secret,
            algorithms=[ALGORITHM],
            options={"require": ["exp", "sub"]},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("player token expired") from None
    except jwt.InvalidTokenError as exc:
        raise Unauthorized(f"invalid player token: {exc}") from None
    return str(claims["sub"])


def require_player(authorization: str | None, secret: bytes, player_id: str) -> None:
    """Pass when the bearer token is valid and for ``player_id``.

    :raises Unauthorized: no token, not a valid one, or expired (401).
    :raises Forbidden: a valid token of another player (403).
    """
    if not authorization:
        raise Unauthorized("a player token is required (Authorization: Bearer <JWT>)")
    if player_of(authorization, secret) != player_id:
        raise Forbidden("the token belongs to another player")
