"""HMAC request signing (API.md: X-Key-Id, X-Signature: t=...,v1=...).

Game servers sign writes with ``LB_HMAC_KEYS``; operators sign ``/v1/admin/*`` calls
with ``LB_ADMIN_KEYS``. The two key sets are disjoint, so neither kind of key works
where the other is required.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from api.errors import Forbidden, Unauthorized


def sign(secret: bytes, body: bytes, timestamp: int | None = None) -> str:
    """The X-Signature header value for ``body`` (used by clients, tests and bench)."""
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(
    keys: dict[str, bytes],
    key_id: str | None,
    signature: str | None,
    body: bytes,
    window_seconds: int,
    now: float | None = None,
) -> str:
    """Return the key id when the signature is valid; raise Unauthorized otherwise."""
    if not key_id or not signature:
        raise Unauthorized("X-Key-Id and X-Signature are required")
    secret = keys.get(key_id)
    if secret is None:
        raise Unauthorized("unknown key id")
    parts: dict[str, list[str]] = {}
    for item in signature.split(","):
        name, sep, value = item.strip().partition("=")
        if sep:
            parts.setdefault(name, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        raise Unauthorized("signature needs t=<unix seconds>") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > window_seconds:
        raise Unauthorized(f"signature timestamp outside the {window_seconds} s window")
    expected = hmac.new(
        secret, f"{timestamp}.".encode() + body, hashlib.sha256
    ).hexdigest()
    # Any v1 may match (a signer may send several during rotation); compare in
    # constant time so the comparison leaks nothing about the expected value.
    if not any(hmac.compare_digest(expected, v) for v in parts.get("v1", [])):
        raise Unauthorized("signature does not match")
    return key_id


def verify_admin(
    admin_keys: dict[str, bytes],
    game_keys: dict[str, bytes],
    key_id: str | None,
    signature: str | None,
    body: bytes,
    window_seconds: int,
    now: float | None = None,
) -> str:
    """Return the admin key id of a validly signed admin call.

    A valid game-server signature is authenticated but not allowed here: Forbidden
    (403). Anything else that does not verify with an admin key: Unauthorized (401).
    """
    if key_id and key_id not in admin_keys and key_id in game_keys:
        verify(game_keys, key_id, signature, body, window_seconds, now)
        raise Forbidden("a game-server key cannot make admin calls")
    return verify(admin_keys, key_id, signature, body, window_seconds, now)
