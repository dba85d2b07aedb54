"""Bearer tokens: ``Authorization: Bearer <JWT>``, HS256 with ``LB_PLAYER_TOKEN_KEY``,
``exp`` required (API.md). A player token's ``sub`` is the playerId; a reader token's
is ``reader:<name>`` (a game's own front end, LB_READ_AUTH=token): it may read, but it
is never a player (no player's own view, no friends). Verified with PyJWT."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import jwt

from api.errors import Forbidden, Unauthorized

ALGORITHM = "HS256"
READER_PREFIX = "reader:"


def issue_token(secret: bytes, subject: str, ttl_seconds: int = 3600) -> str:
    """A token for ``subject``: a player id, or ``reader:<name>``."""
    now = int(time.time())
    payload = {"sub": subject, "iat": now, "exp": now + ttl_seconds}
    return jwt.encode(payload, secret, algorithm=ALGORITHM)


def issue_reader_token(secret: bytes, name: str, ttl_seconds: int = 3600) -> str:
    """A reader token (``sub`` = ``reader:<name>``) for a game's front end."""
    return issue_token(secret, READER_PREFIX + name, ttl_seconds)


@dataclass(frozen=True, slots=True)
class Bearer:
    """Who a valid token names: its ``sub``, and the player it is (None for a
    reader token)."""

    subject: str

    @property
    def player(self) -> str | None:
        return None if self.subject.startswith(READER_PREFIX) else self.subject


class TokenVerifier:
    """Verifies bearer tokens with one key, remembering the tokens it verified.

    A token is the same bytes on every read of a client, so its signature is checked
    once; a remembered token is still refused once its ``exp`` (or before its
    ``nbf``) as PyJWT would (no leeway): at ``exp`` itself it is expired. The
    ``LIMIT`` most recently used valid tokens are remembered (least recently used
    first out), so a flood of new tokens costs each of them its own check but does
    not make the clients in between check theirs again. Invalid tokens are not
    remembered (each is checked, as PyJWT would).
    """

    LIMIT = 10_000

    def __init__(self, secret: bytes, limit: int | None = None) -> None:
        self.secret = secret
        self.limit = self.LIMIT if limit is None else limit
        # Wall clock of the remembered tokens' checks; tests replace it.
        self.clock = time.time
        # token -> (bearer, exp, nbf), least recently used first
        self._known: OrderedDict[str, tuple[Bearer, float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._known)

    def verify(self, authorization: str | None) -> Bearer:
        """The bearer of an ``Authorization`` header value.

        :raises Unauthorized: none, not ``Bearer <JWT>``, invalid or expired (401).
        """
        if not authorization:
            raise Unauthorized("a token is required (Authorization: Bearer <JWT>)")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Authorization must be 'Bearer <JWT>'")
        known = self._known.get(token)
        if known is not None:
            bearer, exp, nbf = known
            now = self.clock()
            if now >= exp:
                raise Unauthorized("token expired")
            if now >= nbf:
                self._known.move_to_end(token)
                return bearer
        bearer, exp, nbf = self._decode(token)
        self._known[token] = (bearer, exp, nbf)
        self._known.move_to_end(token)
        while len(self._known) > self.limit:
            self._known.popitem(last=False)
        return bearer

    def _decode(self, token: str) -> tuple[Bearer, float, float]:
        try:
            claims = jwt.decode(
                token,
                self.secret,
                algorithms=[ALGORITHM],
                options={"require": ["exp", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("token expired") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"invalid token: {exc}") from None
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise Unauthorized("invalid token: sub must be a non-empty string")
        nbf = claims.get("nbf")
        return (
            Bearer(subject),
            float(claims["exp"]),
            float(nbf) if isinstance(nbf, int | float) else float("-inf"),
        )


def issue_player_token(secret: bytes, player_id: str, ttl_seconds: int = 3600) -> str:
    """A token for ``player_id`` (what a game's login service would hand out)."""
    return issue_token(secret, player_id, ttl_seconds)


def player_of(authorization: str, secret: bytes) -> str:
    """The subject a bearer token names (its ``sub``), verified once, unremembered.

    :raises Unauthorized: not ``Bearer <JWT>``, not a valid token, or expired (401).
    """
    return TokenVerifier(secret).verify(authorization).subject


def require_player(authorization: str | None, secret: bytes, player_id: str) -> None:
    """Pass when the bearer token is valid and for ``player_id``.

    :raises Unauthorized: no token, not a valid one, or expired (401).
    :raises Forbidden: a valid token of another player (403).
    """
    if not authorization:
        raise Unauthorized("a player token is required (Authorization: Bearer <JWT>)")
    subject = player_of(authorization, secret)
    if Bearer(subject).player is None:
        raise Forbidden("a reader token cannot read a player's own data")
    if subject != player_id:
        raise Forbidden("the token belongs to another player")
